"""Experiment files shipped with userturn (data package `userturn.experiments`, with `data/`; see
`userturn.core.shipped`)."""
