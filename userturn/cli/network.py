"""How this process reaches its endpoints: --proxy, --ca-bundle and --no-model-check, the flags of every command
that sends requests (`client.http.http_client`)."""

from __future__ import annotations

import argparse


def add_network_arguments(g: argparse._ArgumentGroup) -> None:
    """--proxy, --ca-bundle and --no-model-check: how this process reaches its endpoints (client.http.http_client)."""
    g.add_argument("--proxy", default=None, metavar="URL",
                   help="HTTP proxy for every request, e.g. http://proxy:3128 (default $USERTURN_PROXY; wins over "
                        "HTTPS_PROXY / HTTP_PROXY / NO_PROXY, which are honoured otherwise)")
    g.add_argument("--ca-bundle", default=None, metavar="FILE",
                   help="PEM file (or directory) of the certificate authorities to trust for HTTPS (wins over "
                        "SSL_CERT_FILE / SSL_CERT_DIR)")
    g.add_argument("--no-model-check", action="store_true",
                   help="send requests even when the endpoint's /models list does not name the model (routers and "
                        "gateways)")


PROXY_ENV = "USERTURN_PROXY"  # the proxy when --proxy is not given: how `run --workers` hands its shards a proxy


def configure_network(args: argparse.Namespace) -> None:
    """Apply --proxy (else $USERTURN_PROXY), --ca-bundle and --no-model-check to every endpoint this process opens."""
    import os

    from userturn.client.http.http_client import configure

    configure(proxy=args.proxy or os.environ.get(PROXY_ENV) or None, ca_bundle=args.ca_bundle,
              check_model=not args.no_model_check)
