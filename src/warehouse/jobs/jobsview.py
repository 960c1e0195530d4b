"""Reading and steering jobs the same way on both kinds of warehouse.

``LocalJobs`` works on the embedded catalog (and starts a background manager
when a control request needs one); ``RemoteJobs`` calls the controller's
``/api/v1/jobs``, whose manager runs there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.jobs.jobrecords import JobRecord, StepRecord
from warehouse.remote.warehouse import RemoteWarehouse
from warehouse.usage.select import JobUsage, Selection

if TYPE_CHECKING:
    from warehouse.jobs.submission import JobRequest

__all__ = ["JobsView", "LocalJobs", "RemoteJobs", "jobs_view"]


class LocalJobs:
    # The queries load here, not with this module: a client of a controller
    # never needs them (nor SQLAlchemy).
    def __init__(self, wh: EmbeddedWarehouse) -> None:
        from warehouse.jobs import jobstore

        self.wh = wh
        self.jobstore = jobstore

    def get(self, job_id: int) -> JobRecord:
        return self.jobstore.get_job(self.wh.engine, job_id)

    def all(self) -> list[JobRecord]:
        return self.jobstore.list_jobs(self.wh.engine)

    def steps(
        self, job_id: int, *, number: int | None = None, failed: bool = False
    ) -> list[StepRecord]:
        found = self.jobstore.list_steps(self.wh.engine, job_id, number=number)
        return [s for s in found if s.failures] if failed else found

    def usage(self, selection: Selection) -> list[JobUsage]:
        from warehouse.jobs.usage import job_usage

        return job_usage(self.wh.engine, selection)

    def control(self, job_id: int, control: str) -> JobRecord:
        from warehouse.jobs.runmanager import ensure_manager

        record = self.jobstore.request_control(self.wh.engine, job_id, control)
        ensure_manager(self.wh.home, record.executor)  # one applies it (and runs what is left)
        return record


class RemoteJobs:
    def __init__(self, wh: RemoteWarehouse) -> None:
        self.wh = wh
        self.api = wh.api

    def submit(self, request: JobRequest, *, executor: str | None) -> JobRecord:
        body = {
            "function": request.function,
            "input": request.input,
            "params": dict(request.params),
            "reuse": request.reuse,
            "priority": request.priority,
            "cpus": request.cpus,
            "memory": request.memory,
            "max_attempts": request.max_attempts,
            "executor": executor,
        }
        return JobRecord(**self.api.post("/jobs", body))

    def get(self, job_id: int) -> JobRecord:
        return JobRecord(**self.api.get(f"/jobs/{job_id}"))

    def all(self) -> list[JobRecord]:
        return [JobRecord(**r) for r in self.api.get("/jobs")]

    def steps(
        self, job_id: int, *, number: int | None = None, failed: bool = False
    ) -> list[StepRecord]:
        query: dict[str, Any] = {"failed": "true"} if failed else {}
        if number is not None:
            query["number"] = number
        return [StepRecord(**r) for r in self.api.get(f"/jobs/{job_id}/steps", **query)]

    def usage(self, selection: Selection) -> list[JobUsage]:
        found = self.api.get("/usage", **selection.query())
        return [JobUsage.from_dict(r) for r in found["jobs"]]

    def control(self, job_id: int, control: str) -> JobRecord:
        return JobRecord(**self.api.post(f"/jobs/{job_id}/control", {"control": control}))


JobsView = LocalJobs | RemoteJobs


def jobs_view(wh: object) -> JobsView:
    if isinstance(wh, EmbeddedWarehouse):
        return LocalJobs(wh)
    if isinstance(wh, RemoteWarehouse):
        return RemoteJobs(wh)
    raise UsageError("jobs need an embedded warehouse or a controller")
