"""A comparison from its flags to its report: the typed configuration, the plan, where runs execute (here, a pool of
workers, Slurm) and the pipeline that calls them all."""
