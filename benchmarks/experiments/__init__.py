"""Side-by-side experiments behind the launcher's rules (docs/perf/ names each one's change).

Each module has a ``main()`` that reads its arguments from ``sys.argv`` and needs a CUDA GPU;
importing one runs nothing. Run one with ``python3 -m benchmarks <name> [args]``.
"""
