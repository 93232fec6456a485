#!/usr/bin/env python3
# What FTS5's bm25() costs a tenant beside another tenant's memories: the
# SQLite keyword leg's two statement shapes (FTS5 ranking with bm25(), and
# every match with its text, ranked by the server) on one FTS5 table as
# memories_fts has it (porter unicode61, the tenant as an indexed column),
# with the memory_import benchmark's texts and queries: a tenant of 1,000
# memories alone, then beside another tenant's 100,000. bm25() counts each
# query word in every row of the table, so its cost follows the other
# tenant's size. Python's own sqlite3 module; no server.
#
#   python3 scripts/fts5-ranking.py
import sqlite3, time, sys
S=["ka","lo","mi","ru","te","vo","zan","pel","qui","dor","sha","bex","nu","fi","gor","hal","jus","wen","yot","cra","ple","sto","mar","tiv"]
M=(1<<64)-1
def text(n):
    st=(n*6364136223846793005+1442695040888963407)&M
    def nxt():
        nonlocal st
        st=(st*6364136223846793005+1442695040888963407)&M
        return st>>33
    w=["".join(S[nxt()%24] for _ in range(3)) for _ in range(8)]
    return f"Record {n}: the {' '.join(w[:3])} of {' '.join(w[3:5])} is {' '.join(w[5:])}"
db=sqlite3.connect(':memory:')
db.execute("CREATE VIRTUAL TABLE f USING fts5(content, tenant, mid UNINDEXED, tokenize='porter unicode61')")
NB=10_000_000
db.executemany("INSERT INTO f(content,tenant,mid) VALUES(?,?,?)",[(text(NB+i),'tb',i) for i in range(1000)])
def q(i):
    n=NB+(i*7919)%1000
    ws=[w.strip(':').lower() for w in text(n).split(' ')[:5] if w!='the']
    return 'content : (' + ' OR '.join(f'"{w}"' for w in ws) + ') AND tenant : tb'
qs=[q(i) for i in range(300)]
def run(label):
    for name,sql in [("bm25() ORDER BY, LIMIT 30","SELECT mid FROM f WHERE f MATCH ? ORDER BY bm25(f), mid LIMIT 30"),
                     ("every match with its text","SELECT mid, content FROM f WHERE f MATCH ? LIMIT 2001")]:
        ts=[]
        for x in qs:
            t=time.perf_counter(); r=db.execute(sql,(x,)).fetchall(); ts.append(time.perf_counter()-t)
        ts.sort(); print(f"| {label} | {name} | {len(r)} | {ts[150]*1e3:.2f} ms | {ts[285]*1e3:.2f} ms |")
print("| other tenant's memories | statement | rows | p50 | p95 |")
print("| --- | --- | ---: | ---: | ---: |")
run("none")
db.executemany("INSERT INTO f(content,tenant,mid) VALUES(?,?,?)",[(text(i),'ta',i) for i in range(100000)])
db.commit()
run("100,000")
