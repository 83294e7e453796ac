"""infertune: keeps LLM inference deployments on the throughput plateau and off the KV-cache cliff."""

__version__ = "0.1.0"
