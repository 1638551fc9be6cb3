"""Meta-evaluation harness: datasets, metrics, judge matching, resumable benchmark runs, reports."""
