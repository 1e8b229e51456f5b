"""Tests of the engines floor (observatory/engines/), without launching an engine: each adapter on recorded real
responses (tests/fixtures/engines/SOURCES.md), launch command lines and GPU assignment, serving images without a
Docker daemon, llama.cpp and SGLang arms, the /metrics reader and counters that lie, server facts and knobs,
GPU clocks beside a timed block. The engines themselves run in real_engine/.
"""
