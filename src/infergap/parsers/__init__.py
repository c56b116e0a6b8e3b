"""Parsers: the raw text of each source family into typed values, each text parsed here and only here.

Pure functions over strings or line iterables, no I/O: :mod:`~infergap.parsers.nvsmi`
(nvidia-smi outputs), :mod:`~infergap.parsers.pci` (lspci, sysfs, configuration space),
:mod:`~infergap.parsers.host` (kernel, CPU and package files), :mod:`~infergap.parsers.nccl`
(``NCCL_DEBUG=INFO`` logs), :mod:`~infergap.parsers.engine_log` (SGLang and vLLM server logs),
:mod:`~infergap.parsers.llamacpp_log` (``llama-server`` logs) and :mod:`~infergap.parsers.dmesg`
(kernel log: Xid, AER). Each module's docstrings show real sample output from the fixtures in
``tests/fixtures`` as examples that run (``tests/test_doctests.py``).
"""
