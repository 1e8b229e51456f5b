"""An example observatory plugin: one gate, one field channel, one engine adapter (docs/plugins.md)."""
