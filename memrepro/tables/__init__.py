"""Paper tables rebuilt from ``results/`` only (never reruns anything), with the published numbers beside ours."""
