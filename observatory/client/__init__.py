"""Requests to one serving engine and the answers read back: the lean HTTP/SSE reader, batches, each engine's answer dialect."""
