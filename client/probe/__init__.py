"""The probe itself: the run, perturbations, scoring, seeds, progress, dry runs."""
