// dlock web: the page's script. Plain JavaScript, no build step, nothing
// loaded from elsewhere. It listens to the server-sent events of
// "events" (one snapshot a refresh, shared by every open page), and
// draws the locks, the deadlocks and the wait-for graph from each. Every
// text from Redis goes in with textContent, never as HTML.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  let view = null; // the last snapshot's view (see view.go)
  const $ = (id) => document.getElementById(id);

  // el makes an element with attributes and children (strings: text).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }

  // svg makes an SVG element with attributes.
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // dur formats milliseconds as people read them.
  function dur(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 0) return "no expiry";
    if (ms < 1000) return ms + "ms";
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
  }

  // owner names a Client: its label, host/pid and program.
  function owner(o) {
    if (!o) return "(no owner record)";
    let s = o.host + "/" + o.pid;
    if (o.program) s += " " + o.program;
    if (o.label) s = o.label + " @ " + s;
    return s;
  }

  function cut(s, n) {
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  // filterText is the filter box's text; it is kept in the URL's
  // fragment, so that a link shows what its sender saw.
  function filterText() {
    return $("filter").value.trim();
  }

  function matches(name) {
    const f = filterText().toLowerCase();
    return f === "" || name.toLowerCase().includes(f);
  }

  function render() {
    if (!view) return;
    const v = view;
    document.title = v.title + (v.deadlocks.length ? " – DEADLOCK" : "");
    const shown = v.locks.filter((l) => matches(l.name));
    let held = 0, waiters = 0;
    for (const l of v.locks) {
      if (l.held) held++;
      waiters += l.waiters.length;
    }
    let sum = `${v.locks.length} lock${v.locks.length === 1 ? "" : "s"}, ${held} held, ${waiters} waiter${waiters === 1 ? "" : "s"}`;
    if (filterText() !== "") sum += ` · ${shown.length} match the filter`;
    if (v.at) sum += ` · snapshot of ${new Date(v.at).toLocaleTimeString()}, one every ${dur(v.refresh_ms)}`;
    if (v.keys > 0) sum += ` · ${v.keys} keys scanned`;
    if (v.pattern) sum += ` · pattern ${JSON.stringify(v.pattern)}`;
    $("summary").textContent = sum;

    $("error").hidden = !v.error;
    $("error").textContent = v.error ? "Refresh failed: " + v.error + (v.at ? " (showing the last good snapshot)" : "") : "";
    $("more").hidden = !(v.more > 0);
    $("more").textContent = v.more > 0 ?
      `${v.more} more not shown; narrow the filter (each refresh inspects at most ${v.limit} locks: dlock web --pattern, --limit)` : "";

    renderDeadlocks(v);
    renderGraph(v.graph);
    renderLocks(v, shown);
  }

  function renderDeadlocks(v) {
    $("deadlocks-section").hidden = v.deadlocks.length === 0;
    const ul = $("deadlocks");
    ul.replaceChildren();
    v.deadlocks.forEach((d, i) => {
      ul.append(el("li", { "data-cycle": i, "data-victim": d.victim },
        `Cycle ${i + 1}: ${d.text}. Victim: `, el("span", { class: "victim-name" }, d.victim_who || d.victim), " gives up."));
    });
    $("broken-section").hidden = v.broken.length === 0;
    const bl = $("broken");
    bl.replaceChildren();
    for (const d of v.broken) {
      bl.append(el("li", { "data-victim": d.victim },
        (d.at ? new Date(d.at).toLocaleTimeString() + ": " : "") + d.text + " — ",
        el("span", { class: "victim-name" }, d.victim_who || d.victim), " gave up."));
    }
  }

  function renderGraph(g) {
    const box = $("graph-box");
    box.replaceChildren();
    $("graph-empty").hidden = g.nodes.length > 0;
    if (g.nodes.length === 0) return;
    const root = svg("svg", { id: "graph", viewBox: `0 0 ${g.width} ${g.height}`, width: g.width, height: g.height, role: "img" });
    const defs = svg("defs");
    for (const [id, color] of [["arrow", "#888"], ["arrow-cycle", "#d22"]]) {
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
      m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: color }));
      defs.append(m);
    }
    root.append(defs);
    const byId = {};
    for (const n of g.nodes) byId[n.id] = n;
    const R = 17;
    for (const e of g.edges) {
      const a = byId[e.from], b = byId[e.to];
      if (!a || !b) continue;
      const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
      const ux = dx / len, uy = dy / len;
      const x1 = a.x + ux * R, y1 = a.y + uy * R, x2 = b.x - ux * (R + 3), y2 = b.y - uy * (R + 3);
      // a slight bend, so that a→b and b→a do not overlap
      const cx = (x1 + x2) / 2 - uy * 18, cy = (y1 + y2) / 2 + ux * 18;
      const p = svg("path", {
        class: "edge" + (e.cycle ? " cycle" : ""), d: `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`,
        "marker-end": `url(#${e.cycle ? "arrow-cycle" : "arrow"})`, "data-from": e.from, "data-to": e.to,
      });
      if (e.side) {
        const t = svg("title");
        t.textContent = e.side + " side";
        p.append(t);
      }
      root.append(p);
    }
    for (const n of g.nodes) {
      const cls = ["node", n.type];
      if (n.cycle) cls.push("cycle");
      if (n.victim) cls.push("victim");
      const grp = svg("g", { class: cls.join(" "), transform: `translate(${n.x},${n.y})`, "data-node": n.type });
      if (n.type === "wait") grp.setAttribute("data-token", n.token);
      else grp.setAttribute("data-graph-lock", n.label); // not data-lock: that finds the lock's row
      const title = svg("title");
      title.textContent = n.title;
      grp.append(title);
      if (n.type === "wait") grp.append(svg("circle", { r: R - 2 }));
      else grp.append(svg("rect", { x: -(R - 3), y: -(R - 3), width: 2 * (R - 3), height: 2 * (R - 3), rx: 4 }));
      const label = svg("text", { y: R + 14, "text-anchor": "middle" });
      label.textContent = cut(n.type === "lock" ? n.kind + " " + n.label : n.label, 28);
      grp.append(label);
      if (n.victim) {
        const vt = svg("text", { class: "victim-label", y: -(R + 6), "text-anchor": "middle" });
        vt.textContent = "victim: gives up";
        grp.append(vt);
      }
      root.append(grp);
    }
    box.append(root);
    if (g.omitted > 0) box.append(el("p", { class: "more" }, `${g.omitted} more waits not drawn`));
  }

  // state says what a lock's kind is in: mode, permits, count, leader.
  function state(l) {
    const parts = [];
    switch (l.kind) {
      case "rwmutex":
        parts.push(l.mode ? "held for " + l.mode : "free");
        break;
      case "semaphore":
        parts.push(`${l.free} of ${l.capacity} permits free`);
        break;
      case "latch":
        parts.push(l.count > 0 ? `closed, count ${l.count}` : "open");
        break;
      case "election":
        parts.push(l.held ? "leader's value " + JSON.stringify(l.value) : "nobody leads");
        break;
      default:
        parts.push(l.held ? "held" : "free");
        if (l.kept_for) parts.push("kept for a waiter");
    }
    if (l.fence) parts.push("fence " + l.fence);
    if (l.ttl_ms !== 0) parts.push("TTL " + dur(l.ttl_ms));
    return parts.join(" · ");
  }

  function renderLocks(v, shown) {
    const box = $("locks");
    box.replaceChildren();
    $("locks-empty").hidden = shown.length > 0;
    for (const l of shown) {
      const head = el("h3", {}, el("span", { class: "kind" }, l.kind), el("span", { class: "name" }, l.name),
        el("span", { class: "state" }, state(l)));
      if (l.deadlock) head.append(el("span", { class: "marker", "data-deadlock": true }, "DEADLOCK"));
      if (v.allow_force && (l.held || l.kept_for || l.count > 0)) {
        const b = el("button", { class: "force", type: "button", "data-force": l.name }, "force unlock…");
        b.addEventListener("click", () => force(l));
        head.append(b);
      }
      const sec = el("div", { class: "lock" + (l.deadlock ? " deadlocked" : ""), "data-lock": l.name, "data-kind": l.kind }, head);
      if (l.holders.length > 0) {
        const t = el("table", { class: "holders" }, el("tr", {},
          ...["holder", "owner", "side", l.kind === "semaphore" ? "permits" : "holds", "fence", "held for", "TTL left"].map((h) => el("th", {}, h))));
        l.holders.forEach((h, i) => {
          t.append(el("tr", { class: "holder", "data-holder": i, "data-holder-label": h.label, "data-token": h.token },
            el("td", {}, h.label || "–"), el("td", {}, owner(h.owner)), el("td", {}, h.side || "–"), el("td", {}, String(h.holds)),
            el("td", { class: "mono" }, String(h.fence)), el("td", {}, dur(h.held_for_ms)), el("td", {}, dur(h.ttl_ms))));
        });
        sec.append(t);
      }
      if (l.waiters.length > 0) {
        const t = el("table", { class: "waiters" }, el("tr", {},
          ...["#", "waiter", "side", "permits", "waiting", "place expires in"].map((h) => el("th", {}, h))));
        l.waiters.forEach((w, i) => {
          t.append(el("tr", { class: "waiter", "data-waiter": i, "data-token": w.token, "data-owner-label": w.owner ? w.owner.label : "" },
            el("td", {}, String(i + 1)), el("td", {}, owner(w.owner)), el("td", {}, w.side || "–"),
            el("td", {}, w.permits ? String(w.permits) : "–"), el("td", {}, dur(w.waiting_ms)), el("td", {}, dur(w.expires_ms))));
        });
        sec.append(t);
      }
      box.append(sec);
    }
  }

  // force frees a lock, after the operator confirms it.
  async function force(l) {
    const q = `Free ${l.kind} "${l.name}" whoever holds it?\n\nIts holders learn of it at their next renewal; ` +
      "their work may still be running (fences protect the resources).";
    if (!window.confirm(q)) return;
    try {
      const r = await fetch("api/force", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Dlock-Force": "1" },
        // name_bytes: the name itself when it is not UTF-8 (l.name is then quoted)
        body: JSON.stringify({ kind: l.kind, name: l.name, confirm: l.name, name_bytes: l.name_bytes }),
      });
      const body = await r.json().catch(() => ({}));
      window.alert(r.ok ? `Freed ${l.kind} "${l.name}".` : (body.error || `force failed: HTTP ${r.status}`));
    } catch (e) {
      window.alert("force failed: " + e);
    }
  }

  function setStatus(s, text) {
    const st = $("status");
    st.dataset.status = s;
    st.textContent = text;
  }

  function accept(data) {
    try {
      view = JSON.parse(data);
    } catch (e) {
      setStatus("reconnecting", "bad snapshot: " + e);
      return;
    }
    render();
  }

  // live follows the feed; where EventSource is missing, it polls.
  function live() {
    if (!window.EventSource) {
      const poll = async () => {
        try {
          const r = await fetch("api/snapshot", { cache: "no-store" });
          accept(await r.text());
          setStatus("live", "live (polling)");
        } catch (e) {
          setStatus("reconnecting", "reconnecting…");
        }
        setTimeout(poll, view ? view.refresh_ms : 1000);
      };
      poll();
      return;
    }
    const es = new EventSource("events");
    es.addEventListener("snapshot", (ev) => accept(ev.data));
    es.onopen = () => setStatus("live", "live");
    es.onerror = () => setStatus("reconnecting", "reconnecting…"); // EventSource retries by itself
  }

  document.addEventListener("DOMContentLoaded", () => {
    const f = $("filter");
    const m = /^#filter=(.*)$/.exec(location.hash);
    if (m) {
      // a link's fragment is anyone's text: one that is not valid
      // percent encoding is taken as it is, never allowed to stop the page
      try {
        f.value = decodeURIComponent(m[1]);
      } catch (e) {
        f.value = m[1];
      }
    }
    f.addEventListener("input", () => {
      history.replaceState(null, "", f.value ? "#filter=" + encodeURIComponent(f.value) : location.pathname + location.search);
      render();
    });
    live();
  });
})();
