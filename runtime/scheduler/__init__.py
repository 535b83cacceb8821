"""radixlm.runtime.scheduler: requests, KV accounts and batches as plain Python (never torch).

A test asserts that importing this package does not import torch.
"""

from radixlm.runtime.scheduler.batch import BatchResult, BatchSpec, ScheduledBatch
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache
from radixlm.runtime.scheduler.results import StopChecker
from radixlm.runtime.scheduler.scheduler import Scheduler

__all__ = ["BatchResult", "BatchSpec", "Req", "ReqCache", "ScheduledBatch", "Scheduler", "StopChecker"]
