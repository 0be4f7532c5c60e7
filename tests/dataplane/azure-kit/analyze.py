#!/usr/bin/env python3
"""Turn a prober log (prober.py) and the marks run.sh wrote into the simulator's unknowns
(../shared/contracts/dataplane.md section 7), printed as `dataplane_bench --unknowns ...`.

Marks: one JSON line each, {"mark": name, "t": unix time, "backend": name}:
  down_put, down_succeeded      admin Down on backend B's entry: PUT sent / operation Succeeded (U1, U12)
  none_put, none_succeeded      admin None again (U7)
  remove_succeeded              B's entry removed from its pool (U4)
  single_down                   the only member of a single-member pool made to fail its probe (U8)
  halfopen_down_succeeded       admin Down while B drops its SYN-ACKs (U5; needs --syns)
--syns: "unix_time source_port" per SYN that reached B (tcpdump on B, see run.sh).
Only the experiments whose marks are present are judged."""
import argparse, json, sys


def load(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("marks")
    ap.add_argument("--syns")
    ap.add_argument("--probe-interval", type=float, default=5.0)
    ap.add_argument("--window", type=float, default=30.0, help="seconds after a mark to judge flows")
    a = ap.parse_args()
    ev = load(a.log)
    marks = {m["mark"]: m for m in load(a.marks)}
    new = [e for e in ev if e["kind"] == "new"]
    opened = {e["sid"]: e for e in ev if e["kind"] == "stream_open"}
    ended = {e["sid"]: e for e in ev if e["kind"] == "stream_end"}
    params, notes = {}, []

    def last_new_to(b, after):
        ts = [e["t"] for e in new if e["outcome"] == "ok" and e["backend"] == b and e["t"] >= after]
        return max(ts) if ts else None

    def streams_of(b, before):
        return [ended[s] for s, o in opened.items() if o["backend"] == b and o["t"] < before and s in ended]

    if "down_put" in marks and "down_succeeded" in marks:
        b, put, ok = marks["down_put"]["backend"], marks["down_put"]["t"], marks["down_succeeded"]["t"]
        last = last_new_to(b, put - 1.0)
        if last is None:
            notes.append(f"U1: no new flow reached {b} around the Down: more rate or a longer window")
        else:
            lag = last - ok
            params["apply_before_lro"] = "true" if lag < 0 else "false"
            params["admin_apply_lag_max"] = f"{max(lag, 0.0):.2f}"
            notes.append(f"U1: last new flow on {b} {last - put:+.2f} s after the PUT, {lag:+.2f} s after Succeeded")
        ss = streams_of(b, put)
        reset = [s for s in ss if s["outcome"] in ("reset", "eof") and put <= s["t_last"] <= ok + a.window]
        effective = last if last is not None else ok
        survived = [s for s in ss if s["t_last"] >= effective + 1.0]
        if ss:
            params["down_resets_established"] = "true" if reset else "false"
            notes.append(f"U12: {len(ss)} streams on {b} at the Down: {len(reset)} reset, {len(survived)} still flowing 1 s after Down took effect")
        else:
            notes.append(f"U12: no stream was on {b}: more streams")
    if "none_succeeded" in marks:
        b, ok = marks["none_succeeded"]["backend"], marks["none_succeeded"]["t"]
        ts = [e["t"] for e in new if e["outcome"] == "ok" and e["backend"] == b and e["t"] >= marks.get("none_put", marks["none_succeeded"])["t"]]
        if ts:
            d = min(ts) - ok
            params["none_requires_fresh_up"] = "true" if d > a.probe_interval / 2 else "false"
            notes.append(f"U7: first new flow on {b} {d:+.2f} s after None Succeeded (probe interval {a.probe_interval} s)")
        else:
            notes.append(f"U7: no new flow reached {b} after None")
    if "remove_succeeded" in marks:
        b, ok = marks["remove_succeeded"]["backend"], marks["remove_succeeded"]["t"]
        ss = [s for s in streams_of(b, ok) if s["t_last"] >= ok - 5.0]
        if ss:
            kinds = {"reset": 0, "blackhole": 0, "keep": 0}
            for s in ss:
                if s["outcome"] in ("reset", "eof") and s["t_last"] <= ok + a.window:
                    kinds["reset"] += 1
                elif s["outcome"] == "hung" and s["t_last"] <= ok + a.window:
                    kinds["blackhole"] += 1
                else:
                    kinds["keep"] += 1
            params["removed_member_flows"] = max(kinds, key=kinds.get)
            notes.append(f"U4: streams on {b} at removal: {kinds}")
    if "single_down" in marks:
        b, t = marks["single_down"]["backend"], marks["single_down"]["t"]
        ss = streams_of(b, t)
        killed = [s for s in ss if s["outcome"] != "alive" and s["t_last"] <= t + a.window]
        if ss:
            params["single_member_all_down_kills"] = "true" if killed else "false"
            notes.append(f"U8: {len(ss)} streams on the single member: {len(killed)} ended within {a.window} s")
    if "halfopen_down_succeeded" in marks and a.syns:
        b, ok = marks["halfopen_down_succeeded"]["backend"], marks["halfopen_down_succeeded"]["t"]
        started = {e["sport"]: e["t"] for e in new if e.get("sport")}
        late = 0
        with open(a.syns) as f:
            for line in f:
                p = line.split()
                if len(p) >= 2 and float(p[0]) > ok + 1.0 and started.get(int(p[1]), 1e18) < ok:
                    late += 1
        params["pin_half_open"] = "true" if late else "false"
        notes.append(f"U5: {late} retransmitted SYNs of flows begun before the Down still reached {b}")
    for n in notes:
        print(n)
    print("dataplane_bench --unknowns " + ",".join(f"{k}={v}" for k, v in sorted(params.items())))


if __name__ == "__main__":
    main()
