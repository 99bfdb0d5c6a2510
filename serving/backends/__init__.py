"""Model servers and the backends that run them (adapters: no Django here)."""
