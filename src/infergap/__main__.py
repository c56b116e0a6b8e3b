"""``python -m infergap`` and the ``infergap`` console script: the command line, started with the
garbage collector tuned for a short command.

CPython's default threshold (a young-generation pass every 700 net allocations) was made for long
programs; a command that imports some 300 modules (Typer, pydantic, the catalogs' models) and then
builds a report of thousands of small objects runs about a hundred passes, most of them walking
objects that live until exit: about a tenth of an audit's CPU time on the 2-core CI machine
(``benchmarks/start_speed.py``). With a pass every 200,000 allocations an audit runs none or one
(measured: 35-50 ms of collector time with 50,000, about 1 ms with 200,000, the peak memory the
same 48 MB), and a long command (bench, fleet) still collects: the cyclic garbage held between
passes stays bounded (tens of megabytes at worst).
"""

import gc

#: Net allocations between young-generation passes (CPython's default: 700); the older
#: generations keep their default ratios.
GC_GEN0_THRESHOLD = 200_000


def run() -> None:
    """Tune the collector, then import and run the command line (:func:`infergap.cli.main`): the
    import comes after, so that the imports themselves run with the tuned collector."""
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
    from infergap.cli import main  # the command line's door: imported after the tuning above

    main()


if __name__ == "__main__":
    run()
