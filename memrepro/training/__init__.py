"""Training: the cross-encoder of the v2 cascade, per split seed, on that seed's dev conversations only."""
