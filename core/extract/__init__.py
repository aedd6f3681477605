"""Candidate extraction: rules propose, the policy decides (seed 十二)."""
