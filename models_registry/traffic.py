"""Traffic between a deployment's variants: variant choice, sticky hashing, rollout steps, guardrails and
A/B statistics. Pure: no Django, no I/O (DESIGN.md "Layers").
"""
