"""RF-Mem family (Zhang et al., ICLR 2026): the familiarity gate, Recollection, and their composition."""
