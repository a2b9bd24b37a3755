"""A fleet of tuning workers sharing one tuning DB.

`kfactory enqueue` turns suite rows, random draws or a file of problems into jobs (problems.py),
each unique per problem, device identity and source version; `kfactory worker` starts one worker
process per GPU (supervisor.py), each claiming jobs under a lease renewed by a heartbeat thread and
tuning them through api.tune_problem (worker.py); `kfactory jobs` shows the queue (view.py). The
queue itself lives in the database: tuning_db.jobs.
"""
