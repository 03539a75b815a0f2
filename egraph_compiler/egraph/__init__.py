"""The e-graph bridge: the egglog schema, encoding and decoding UOps, the rule language, saturation sessions."""
