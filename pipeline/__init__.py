"""minibert's workflow: params, stages, MLflow tracking, Prefect flows and the CLI.

It uses the ``minibert`` library; the library never imports it.
"""
