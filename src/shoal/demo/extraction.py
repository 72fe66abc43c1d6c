"""The demo model's answer to the extraction prompt of the knowledge graph's model extractor
(`shoal.retrieval.extraction`).

A prompt whose system message opens with "Role: extractor" asks for one passage's entities and
relations (the passage follows "Passage:" in the user message). The demo model answers what the
heuristic extractor finds there — capitalised names and acronyms, `co_occurs` within a sentence
— as the strict JSON the prompt asks for, labelled as the demo model's in a `note` the format
leaves aside. Markers in the passage steer it:

- `[demo:extraction=broken]`: prose, not JSON;
- `[demo:extraction=invalid]`: JSON of the wrong shape (`entities` a string, a relation without
  its object).
"""

from __future__ import annotations

import json

from shoal.demo.fake.exchange import LABEL
from shoal.retrieval.extraction import EXTRACTOR_ROLE, extract_heuristic

PASSAGE = "Passage:\n"


def extraction_answer(prompt: str) -> str | None:
    """The answer to `prompt` (every system and user text of a conversation) when it is an
    extraction prompt, else None. Pure and deterministic."""
    if not any(line.strip() == EXTRACTOR_ROLE for line in prompt.splitlines()):
        return None
    passage = prompt.split(PASSAGE, 1)[1] if PASSAGE in prompt else ""
    if "[demo:extraction=broken]" in passage:
        return (f"{LABEL} This passage names a few things, I think (not JSON, on purpose: "
                "[demo:extraction=broken]).")
    if "[demo:extraction=invalid]" in passage:
        return json.dumps({"entities": "all of them", "relations": [{"subject": "this"}]})
    found = extract_heuristic(passage)
    return json.dumps({
        "entities": list(found.entities),
        "relations": [{"subject": r.subject, "relation": r.relation, "object": r.object}
                      for r in found.relations],
        "note": f"{LABEL} Capitalised names and acronyms, related when they share a sentence."})
