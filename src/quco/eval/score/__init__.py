"""Scoring recorded runs: answer metrics, intervals and paired tests, detection of when retrieval was needed,
decision analyses, run summaries and the identity of two runs' decisions."""
