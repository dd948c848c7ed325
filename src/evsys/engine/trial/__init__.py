"""One trial: `Trial` (evsys.engine.trial.run) drives phases that are functions over one `TrialState`.

| module | holds |
|---|---|
| `state.py` | `TrialState`: spec, store, the sandbox and whether it is alive, network now, result |
| `environment.py` | the environment phase: sandbox spec and start, healthcheck, network, release |
| `images.py` | the task's image (built, pulled or cached) and the sandbox spec moved onto it |
| `sidecars.py` | docker-compose sidecars: started before the main sandbox, stopped after it |
| `healthcheck.py` | `[environment.healthcheck]` (Docker's semantics) |
| `agent.py` | the agent phase: which agent, `prepare_sandbox`, `setup`, `run`, failure causes |
| `verifier.py` | the verifier phase: tests in the sandbox, /logs copied out, scoring |
| `separate.py` | `environment_mode = "separate"`: the tests in a fresh sandbox |
| `artifacts.py` | the task's declared artifacts, copied out after the agent |
| `single_step.py` | the driver of an ordinary trial: agent, then verifier |
| `multi_step.py` | the driver of a `[[steps]]` task: agent and tests once per step, rewards combined |
| `run.py` | `Trial`: load the task, environment, a driver, release, write the files |
"""

from evsys.engine.trial.agent import classify_agent_exception
from evsys.engine.trial.run import EXCEPTION_FILE, Trial
from evsys.engine.trial.state import TrialState, describe_exception

__all__ = ["EXCEPTION_FILE", "Trial", "TrialState", "classify_agent_exception", "describe_exception"]
