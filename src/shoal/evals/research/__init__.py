"""`shoal eval research`: the `research` workflow measured on a bundled set nobody on this
project wrote.

- `goldset`: the set — documents and one data file of public-domain or permissively licensed
  text (`corpus/`, its README names each file's source and licence) and questions with gold
  answers, gold passages and gold SQL (`questions.yaml`);
- `recall`: retrieval alone (recall@5 and MRR, BM25 and hybrid), no model and no server;
- `reading`: what a report says — its cited sentences, its gaps, the gold facts it states,
  sentences about another corpus;
- `runs`: each question as a `research` task on a control plane, scored from the task's detail
  and its report;
- `judge`: an optional model's judgement of each answer against the gold one.
"""
