# 3 shared system prompts (450..1100 tokens), 40 conversations of 2..6 turns, user messages 20..300 tokens,
# replies 30..500 tokens (uniform), interleaved at random: turn k+1 = turn k's prompt + reply + new message.
import json, random, sys
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rng = random.Random(seed)
out = []
for i in range(3):
    out.append({"pool": f"system-{i}", "random": rng.randint(450, 1100), "seed": rng.getrandbits(63)})
convs = []
for c in range(40):
    convs.append({"sys": rng.randrange(3), "turns": rng.randint(2, 6), "done": 0, "last": None})
rid = 0
live = list(range(40))
while live:
    c = rng.choice(live)
    cv = convs[c]
    user, reply = rng.randint(20, 300), rng.randint(30, 500)
    if cv["last"] is None:
        segs = [{"pool": f"system-{cv['sys']}", "off": 0, "len": out[cv['sys']]["random"]}, {"fresh": user}]
    else:
        segs = [{"from": cv["last"]}, {"fresh": user}]
    out.append({"id": rid, "session": f"c{c}", "tenant": "t0", "segments": segs, "output": reply})
    cv["last"] = rid; cv["done"] += 1; rid += 1
    if cv["done"] == cv["turns"]: live.remove(c)
for o in out: print(json.dumps(o))
