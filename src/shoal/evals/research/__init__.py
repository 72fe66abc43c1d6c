"""The `research` workflow's evaluation set, nobody on this project wrote.

- `goldset`: the set — documents and one data file of public-domain or permissively licensed
  text (`corpus/`, its README names each file's source and licence) and questions with gold
  answers, gold passages and gold SQL (`questions.yaml`);
- `recall`: retrieval alone (recall@5 and MRR, BM25 and hybrid), no model and no server.
"""
