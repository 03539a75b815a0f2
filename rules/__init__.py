"""Rewrite rules for the e-graph: symbolic, rangeify, optops, lowering."""
