"""The asv suite (configuration: ``asv.conf.json`` at the repository root).

``DEDUPSTORE_ASV_SMOKE=1`` shrinks every size (stores, runs) so that
``asv run --quick`` checks the whole suite in about a minute; CI runs it that
way so the benchmarks cannot rot. Figures from a smoke run mean nothing.
"""
