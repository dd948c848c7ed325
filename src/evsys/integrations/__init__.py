"""evsys as the sandbox of other frameworks: Harbor, verifiers and tinker-cookbook (one module each)."""
