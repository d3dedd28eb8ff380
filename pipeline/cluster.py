"""Scale-out on Celery: the code location's job for a Dagster instance on Postgres with Celery workers.

``all_assets_celery`` materializes every asset like ``all_assets_job``, but each step is a Celery task
picked up by a worker. A step goes to the queue named by its ``dagster-celery/queue`` op tag; without
one, a step of a pool goes to the queue named after its pool (every heavy experiment step is in pool
``compute_device``, so it goes to queue ``compute_device``) and every other step (summaries, checks,
the report) to ``dagster``, Celery's default queue here. Start one worker per queue, e.g. a GPU node's
``dagster-celery worker start -A dagster_celery.app -y celery.yaml -q compute_device`` and a CPU node's
``... -q dagster`` (see ``deploy/README.md``). ``make test-cluster`` runs it for real.

The job exists only where ``dagster-celery`` is installed (``pip install -e '.[cluster]'``): the code
location loads without it, with ``all_assets_celery`` left out.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import dagster as dg

#: The Celery queue of steps that belong to no pool and name no queue of their own.
LIGHT_QUEUE = "dagster"
#: Op tag that names a step's queue (dagster-celery's own tag); wins over the pool.
QUEUE_TAG = "dagster-celery/queue"
#: The job's name in the code location.
CELERY_JOB = "all_assets_celery"


def celery_available() -> bool:
    """Whether ``dagster-celery`` (the cluster extra) is installed."""
    return importlib.util.find_spec("dagster_celery") is not None


def step_queue(tags: dict[str, str] | None, pool: str | None, default: str = LIGHT_QUEUE) -> str:
    """The Celery queue of a step: its ``dagster-celery/queue`` tag, else its pool's name, else ``default``."""
    tag = (tags or {}).get(QUEUE_TAG)
    if tag:
        return tag
    return pool or default


def _pool_routing_executor() -> dg.ExecutorDefinition:
    from dagster_celery.core_execution_loop import core_celery_execution_loop
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor
    from dagster_celery.executor import _submit_task as submit_task

    def submit_routed(app: Any, plan_context: Any, step: Any, queue: str, priority: int, known_state: Any) -> Any:
        # dagster-celery passes the tag's queue or the default one; a step of a pool without a
        # tag of its own goes to its pool's queue instead.
        routed = step_queue(step.tags, step.pool, default=queue)
        if routed != queue:
            plan_context.log.debug(f'step "{step.key}" of pool "{step.pool}" goes to queue "{routed}"')
        return submit_task(app, plan_context, step, routed, priority, known_state)

    class PoolRoutingCeleryExecutor(CeleryExecutor):
        """dagster-celery's executor, each step of a pool sent to the queue named after the pool."""

        def execute(self, plan_context: Any, execution_plan: Any) -> Any:
            return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit_routed)

    @dg.executor(
        name="celery_by_pool",
        config_schema=CELERY_CONFIG,
        requirements=dg.multiple_process_executor_requirements(),
    )
    def celery_by_pool(init_context: dg.InitExecutorContext) -> dg.Executor:
        """Celery executor (dagster-celery's configuration: broker, backend, include, config_source,
        retries) that routes each step of a pool to the queue named after the pool."""
        from dagster._core.execution.retries import RetryMode

        config: dict[str, Any] = dict(init_context.executor_config)
        return PoolRoutingCeleryExecutor(
            broker=config.get("broker"),
            backend=config.get("backend"),
            config_source=config.get("config_source"),
            include=config.get("include"),
            retries=RetryMode.from_config(config["retries"]),
        )

    return celery_by_pool


def celery_jobs() -> list[dg.UnresolvedAssetJobDefinition]:
    """``all_assets_celery`` where dagster-celery is installed, else nothing."""
    if not celery_available():
        return []
    return [
        dg.define_asset_job(
            CELERY_JOB,
            selection=dg.AssetSelection.all(),
            executor_def=_pool_routing_executor(),
            description="Materialize every asset and run every check with each step a Celery task: steps of "
            "pool compute_device on queue compute_device, the others on queue dagster. Needs a persistent "
            "instance (Postgres), a broker and workers (deploy/README.md).",
        )
    ]
