"""Tests of the judge floor (observatory/judge/), on stored sessions and hand-built rows: the figures and speed
verdicts (S and its interval, paired and bracketed timing, steady state, step time, latency, precision, a busy
host, CUDA-graph coverage), rates against controls, the verdict policy, known findings, engines compared with
each other, and a stored session judged again offline. The timing designs on a real engine are in real_engine/.
"""
