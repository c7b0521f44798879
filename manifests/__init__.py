"""Serving manifests shipped with userturn (data package `userturn.manifests`; see `userturn.core.shipped`)."""
