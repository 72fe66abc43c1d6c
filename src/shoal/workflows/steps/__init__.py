"""The handlers of a document's step kinds, one module each, behind `runs.StepHandler`: `agent`,
`map`, `route`, `expand`, `person` (`human` and `gate`). The interpreter looks a step's handler
up by its `DocStepKind`; a handler is given a `runs.Runs` and never imports another (what they
share lives in `runs` and `board`)."""
