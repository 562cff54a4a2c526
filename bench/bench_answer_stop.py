"""QuCo-RAG's ``stop_after_answer`` replayed on recorded runs: does it change what the loop reads, and what it saves.

Usage: python bench/bench_answer_stop.py RUN_DIR [RUN_DIR ...]

Every draft and regeneration recorded in the runs' traces (whole continuations, generated without the option) is
fed word by word to QuCo-RAG's stop predicate, as a decoder would feed it, with the real spaCy splitter. Greedy
decoding is causal, so a generation stopped early is the start of the recorded one: the replay shows exactly where
the option would have stopped each call. It then checks that the loop reads the same from the cut text as from the
whole one:
- a draft: the sentences the stage-2 scan reads (chatty ones filtered, up to a disclaimer or the answer sentence);
- a regeneration: the kept sentences and, when they do not state the answer, what the scan reads of the rest.
Prints the texts replayed, those read identically, those stopped early and the characters saved.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from quco.answer import has_answer
from quco.methods.quco import ANSWER_MARK, QuCoParams, QuCoRAG
from quco.text.sentences import SpacySentenceSplitter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (results.jsonl with traces)")
    args = parser.parse_args()
    splitter = SpacySentenceSplitter()
    method = QuCoRAG(QuCoParams(stop_after_answer=True))
    ctx = SimpleNamespace(parts=SimpleNamespace(text=SimpleNamespace(splitter=splitter)))
    p = method.params

    def scan(text: str) -> list[str]:
        out = []
        for sentence in method.clean(splitter.split(text)):
            if method._has(sentence, p.negation_phrases):
                return out + ["<disclaimer>"]
            out.append(sentence)
            if method._has(sentence, (ANSWER_MARK,)):
                break
        return out

    def regeneration(text: str) -> tuple:
        sentences = method.clean(splitter.split(text))
        n = 2 if len(sentences) > 1 and has_answer(sentences[1]) and not has_answer(sentences[0]) else 1
        kept, rest = " ".join(sentences[:n]), " ".join(sentences[n:])
        return (kept,) if has_answer(kept) else (kept, scan(rest))

    def cut(text: str) -> str:
        done = method.draft_stop(ctx)  # type: ignore[arg-type]
        grown = ""
        for i, ch in enumerate(text):
            grown += ch
            if ch.isspace() and i + 1 < len(text) and not text[i + 1].isspace() and done(grown):
                return grown
        return text

    totals = {"texts": 0, "same": 0, "stopped": 0, "chars": 0, "saved": 0}
    differing: list[str] = []
    for run in args.runs:
        lines = (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
        for line in lines:
            for step in json.loads(line).get("trace", {}).get("steps", []):
                for key, reading in (("draft", scan), ("regenerated", regeneration)):
                    text = step.get(key) or ""
                    if not text:
                        continue
                    short = cut(text)
                    totals["texts"] += 1
                    totals["chars"] += len(text)
                    if len(short) < len(text):
                        totals["stopped"] += 1
                        totals["saved"] += len(text) - len(short)
                    if reading(short) == reading(text):
                        totals["same"] += 1
                    else:
                        differing.append(text)
        print(f"{run}: {len(lines)} questions", flush=True)
    t = totals
    print(
        f"{t['texts']} drafts and regenerations replayed; read identically: {t['same']}; stopped early: "
        f"{t['stopped']}; characters saved: {t['saved']:,} of {t['chars']:,} ({t['saved'] / max(t['chars'], 1):.1%})"
    )
    for text in differing[:5]:
        print("differs:", json.dumps(text)[:300])
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
