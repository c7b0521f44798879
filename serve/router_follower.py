"""Keeps a running sglang-router (the 0.3 worker API) in step with the replicas' endpoint files: a replica that
appears is added (`POST /workers`), a replica that moved (a requeued SLURM task) has its new URL added and its old
URL removed (`DELETE /workers/{id}`, the id read from `GET /workers`), as is the URL of a replica whose endpoint
file is gone (its task ended). Workers that no replica of this job ever had are not touched.

    python router_follower.py ENDPOINT_DIR JOB N [URL ...]   (the router's first worker URLs; the router listens
                                                             on 127.0.0.1:$ROUTER_PORT; $USERTURN_ROUTER_POLL_S)

Standard library only: the sbatch script runs this file's text with the job's Python (`python -c`), which need not
have userturn installed. Errors are printed once each (not every poll) and retried; a router without `/workers`
(older than 0.3) ends the follower with one line.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

RETRY_S = 60.0  # an add or removal the router accepted but has not done yet is asked again after this long
POLL_S = 5.0  # the endpoint files are read this often
RECHECK_S = 60.0  # the router's list is read when they change, and at least this often (its log stays short)


class Router:
    """The worker routes of sglang-router 0.3 at `base` (no proxy)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with self.opener.open(req, timeout=30) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def workers(self) -> dict[str, str]:
        """{url: worker id} of the registered workers (a worker still being added is not listed)."""
        return {w["url"]: w["id"] for w in self.call("GET", "/workers")["workers"]}

    def add(self, url: str) -> None:
        self.call("POST", "/workers", {"url": url})

    def remove(self, worker_id: str) -> None:
        self.call("DELETE", "/workers/" + worker_id)


def replica_urls(folder: str, job: str, n: int) -> dict[int, str]:
    """{task: root URL} of each replica whose endpoint file exists and parses (one being written is skipped)."""
    urls = {}
    for i in range(n):
        try:
            with open(os.path.join(folder, f"{job}_{i}.json")) as fh:
                urls[i] = json.load(fh)["base_url"].rsplit("/v1", 1)[0]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return urls


class Follower:
    """What the router should hold: the URL in each replica's endpoint file; what it should lose: every other URL a
    replica had (the router's first worker list included), e.g. the old URL of a replica that moved."""

    def __init__(self, initial: Iterable[str] = ()) -> None:
        self.known: set[str] = set(initial)  # every URL a replica of this job served at
        self.asked: dict[tuple[str, str], float] = {}  # (POST|DELETE, url) -> when it was last asked

    def step(self, router: Router, urls: dict[int, str], now: float) -> list[str]:
        """One reconciliation against the router's list; returns the lines to print."""
        wanted = set(urls.values())
        self.known |= wanted
        registered = router.workers()
        out = []
        for i, url in sorted(urls.items()):
            if url not in registered and self._due("POST", url, now):
                router.add(url)
                self.asked[("POST", url)] = now
                out.append(f"userturn: router: adding replica {i} at {url}")
        for url in sorted(self.known - wanted):
            if url in registered and self._due("DELETE", url, now):
                router.remove(registered[url])
                self.asked[("DELETE", url)] = now
                out.append(f"userturn: router: removing {url} (no replica serves there now)")
        return out

    def _due(self, method: str, url: str, now: float) -> bool:
        """False while an accepted request for `url` may still be under way in the router's job queue."""
        last = self.asked.get((method, url))
        return last is None or now - last >= RETRY_S


def main(argv: list[str]) -> int:
    folder, job, n, initial = argv[0], argv[1], int(argv[2]), argv[3:]
    poll = float(os.environ.get("USERTURN_ROUTER_POLL_S") or POLL_S)
    router = Router("http://127.0.0.1:" + os.environ["ROUTER_PORT"])
    follower, last_error = Follower(initial), ""
    seen: dict[int, str] | None = None  # the endpoint files at the last reconciliation that changed nothing
    checked = 0.0
    while True:
        try:
            urls, now = replica_urls(folder, job, n), time.monotonic()
            if urls != seen or now - checked >= RECHECK_S:  # the router is asked only when something may differ
                lines = follower.step(router, urls, now)
                for line in lines:
                    print(line, flush=True)
                seen, checked = (None if lines else urls), now  # after a change, look again at the next poll
            last_error = ""
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 405) and exc.url.endswith("/workers"):
                print(f"userturn: router: {exc.url} answered {exc.code}: following replicas needs sglang-router 0.3 or "
                      "later (its /workers API); replicas that start later or move are not added", flush=True)
                return 1
            last_error = _report(f"{exc.url} {exc}", last_error)
        except Exception as exc:  # the router restarting, a timeout: said once, retried at the next poll
            last_error = _report(f"{router.base} ({exc})", last_error)
        time.sleep(poll)


def _report(error: str, last: str) -> str:
    if error != last:
        print(f"userturn: router: {error}; retrying every poll", flush=True)
    return error


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
