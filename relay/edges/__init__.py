"""The edges: one module per command that runs sessions (serve, attach, sidecar) and what they share (docs/architecture.md)."""
