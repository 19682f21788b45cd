"""Gold batch views: pure DataFrame -> DataFrame transforms (no session, no I/O, no env reads).

* :mod:`spark_jobs.gold.history`: bronze CDC records -> the ordered, typed change history of one table;
* :mod:`spark_jobs.gold.dims`: change history -> SCD2 dimensions (``gold.dim_*``);
* :mod:`spark_jobs.gold.facts`: silver tables and dimensions -> facts of one data interval (``gold.fct_*``).

The batch job reads the tables, calls these and overwrites its interval's partition.
"""
