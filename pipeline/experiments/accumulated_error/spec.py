"""B, eager vs fused accumulated error: id and asset group. Its input sets are S's pools
(``toolkit.spec.SIZES``: sets per chain and distribution, row and attention shapes); its decision
rule is in ``rules.py``."""

ID, GROUP = "B", "B_accumulated_error"
