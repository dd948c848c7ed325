"""evsys inside other frameworks: each subpackage adapts evsys to one framework's published extension point
(`evsys.integrations.harbor`: Harbor's environment class; `evsys.integrations.verifiers`: verifiers' runtime;
`evsys.integrations.tinker`: tinker-cookbook's environments and sandbox factory). They are thin adapters over
evsys's sandbox contract and trial machinery, import their framework lazily, and are never imported by evsys
itself (docs/integrations.md)."""
