"""gunicorn configuration of ``load.py --queries orm``: the worker pages run the ORM twins of
the precompiled queries (``annotations.precompiled.PRECOMPILED = False``), for comparison."""


def post_worker_init(worker):
    from annotations import precompiled

    precompiled.PRECOMPILED = False
