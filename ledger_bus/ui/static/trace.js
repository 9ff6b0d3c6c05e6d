// The trace view of a session: its runs as spans on a time axis (the delegation tree), each
// model and tool call a bar from its request to its result, open and flagged calls marked;
// zoom, pan, search, a click for the event and its pair; and the conversation, as a chat.
//
// It reads the session's ATIF trajectory (what `ledger-bus export --format atif` writes), a
// window of the newest events at a time (`trajectory?window=N`, O(N) whatever the session's
// length; "earlier events" reads the window before), each call's times in its
// `extra.ledger`; and the runs of that while (`runs?from=&to=`). Everything an agent wrote
// goes on screen as text (textContent), never as markup.
"use strict";
(function () {
  function cursorMs(cursor) { return Number(String(cursor).split("-")[0]); }
  function pad(n, width) { return String(n).padStart(width || 2, "0"); }
  // As the server writes them (ledger_bus/model/durations.py duration_text).
  function duration(ms) {
    ms = Math.max(0, Math.round(ms));
    if (ms < 1000) { return ms + " ms"; }
    if (ms < 60000) { return (ms / 1000).toFixed(2) + " s"; }
    if (ms < 3600000) { return Math.floor(ms / 60000) + " m " + pad(Math.floor(ms / 1000) % 60) + " s"; }
    return Math.floor(ms / 3600000) + " h " + pad(Math.floor(ms / 60000) % 60) + " m";
  }
  function clock(ms, withMs) {
    const d = new Date(ms);
    const t = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds());
    return withMs ? t + "." + pad(d.getUTCMilliseconds(), 3) : t;
  }
  // Characters that reorder the text around them (bidi embeddings, overrides, isolates,
  // marks), shown by name as the server's pages show them: `invoice⟨U+202E⟩evil…`.
  const BIDI = /[\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]/g;
  function visible(text) {
    return String(text).replace(BIDI, function (c) {
      return "\u27e8U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9";
    });
  }
  // A count in words that agree with it, as the server's pages write them (ledger_bus/ui/words.py
  // counted): "1 run", "2 runs", "0 calls".
  function counted(n, one, many) {
    return n.toLocaleString("en") + " " + (n === 1 ? one : (many || one + "s"));
  }
  window.LedgerView = { cursorMs: cursorMs, duration: duration, counted: counted };

  const root = document.getElementById("trace");
  if (!root) { return; }
  const cfg = root.dataset;
  const wf = document.getElementById("waterfall");
  const detail = document.getElementById("detail");
  const range = document.getElementById("trace-range");
  const earlier = document.getElementById("trace-earlier");
  const live = !cfg.before && document.getElementById("live") !== null;

  // The axis's width, kept by an observer: reading it at each placing would lay the page out.
  // It watches the rows' content box, which leaves out the scrollbar they get once there are
  // many: the labels beside the bars are placed in pixels, against a wider track one is cut.
  let trackWidth = Math.max(wf.clientWidth - 300, 200);
  const sizer = new ResizeObserver(function (entries) {
    const width = Math.max(entries[entries.length - 1].contentRect.width - 300, 200);
    if (Math.abs(width - trackWidth) > 0.5) { trackWidth = width; place(); }
  });
  sizer.observe(wf);
  const state = {
    docs: [],        // the ATIF documents read, oldest window first
    calls: new Map(), // run + "\x1f" + call id -> call
    runs: [],
    runsText: "",
    older: null,     // the cursor the next earlier window ends before
    lo: null, hi: null, // the while the windows read cover (ms)
    d0: 0, d1: 1,    // the while on screen
    fitted: true,    // following the whole while (until a zoom or a pan)
    rows: [],
    selected: null,
    query: "",
    slowest: false,  // each run's calls by duration, not in the order they were made
    toNow: false,    // open calls and running runs drawn on to now, the axis with them
  };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = visible(text); }
    return node;
  }
  function keyOf(run, id) { return (run || "") + "\x1f" + id; }
  function tokensOf(metrics) {
    if (!metrics || metrics.prompt_tokens === undefined) { return ""; }
    return metrics.prompt_tokens.toLocaleString("en") + " in · " +
      (metrics.completion_tokens || 0).toLocaleString("en") + " out tokens";
  }

  // -- reading ----------------------------------------------------------------------------

  function addCall(ledger, id, tool, kind, extra) {
    const key = keyOf(ledger.run, id);
    const found = state.calls.get(key);
    const call = found || { key: key, id: id, run: ledger.run || "", tool: tool, kind: kind };
    if (ledger.requested) { call.requested = ledger.requested; call.start = cursorMs(ledger.requested); }
    if (ledger.settled) { call.settled = ledger.settled; call.end = cursorMs(ledger.settled); }
    if (ledger.settled_by) { call.settledBy = ledger.settled_by; }
    if (ledger.flagged) { call.flagged = ledger.flagged; }
    if (!found || ledger.settled || !call.settled) { call.status = ledger.status; }
    Object.assign(call, extra);
    state.calls.set(key, call);
  }

  // The runs of a step's calls, its model call's first: the runs of the turn the trajectory put
  // a call in (see home).
  function stepRuns(step) {
    const extra = step.extra || {};
    const runs = extra.model_call && extra.model_call.run ? [extra.model_call.run] : [];
    for (const call of step.tool_calls || []) {
      const ledger = call.extra && call.extra.ledger;
      if (ledger && ledger.run) { runs.push(ledger.run); }
    }
    return runs;
  }

  function ingest(doc) {
    (function walk(trajectory) {
      for (const step of trajectory.steps || []) {
        const extra = step.extra || {};
        const turn = stepRuns(step);
        if (extra.model_call) {
          addCall(extra.model_call, extra.model_call.tool_call_id, "model", "model", {
            agent: extra.agent, model: step.model_name || "", tokens: tokensOf(step.metrics),
            text: step.message || "", turn: turn,
          });
        }
        for (const call of step.tool_calls || []) {
          const ledger = call.extra && call.extra.ledger;
          if (!ledger) { continue; }
          addCall(ledger, call.tool_call_id, call.function_name, "tool", {
            agent: extra.agent, text: JSON.stringify(call.arguments), turn: turn,
          });
        }
      }
      for (const sub of trajectory.subagent_trajectories || []) { walk(sub); }
    })(doc);
    const window = (doc.extra && doc.extra.ledger && doc.extra.ledger.window) || {};
    if (window.first) {
      state.lo = Math.min(state.lo === null ? Infinity : state.lo, cursorMs(window.first));
      state.hi = Math.max(state.hi === null ? -Infinity : state.hi, cursorMs(window.last));
    }
    return window;
  }

  function trajectoryUrl(before) {
    let url = cfg.trajectory + "?window=" + encodeURIComponent(cfg.window);
    if (before) { url += "&before=" + encodeURIComponent(before); }
    return url;
  }

  function readWindow(before) {
    return fetch(trajectoryUrl(before)).then(function (r) {
      if (!r.ok) { throw new Error("the trajectory did not load (" + r.status + ")"); }
      return r.json();
    }).then(function (doc) {
      const window = ingest(doc);
      state.docs.unshift(doc);
      state.older = window.older || null;
      earlier.hidden = state.older === null;
      return readRuns();
    });
  }

  function readRuns() {
    if (state.lo === null) { return Promise.resolve(false); }
    const to = live ? Date.now() : state.hi;
    return fetch(cfg.runs + "?from=" + Math.floor(state.lo) + "&to=" + Math.ceil(to))
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null || text === state.runsText) { return false; }
        state.runsText = text;
        state.runs = JSON.parse(text);
        return true;
      });
  }

  // -- laying out ---------------------------------------------------------------------------

  function now() { return live ? Math.max(Date.now(), state.hi || 0) : state.hi; }
  // Where an open call's bar (or a running run's) ends: at the session's last event, so the
  // axis is the session's own while and a call left open an hour ago does not squeeze every
  // finished run into its first pixels; how long it has been open is said beside it. "to now"
  // draws them on to the clock instead.
  function openEnd() { return state.toNow || state.hi === null ? now() : state.hi; }
  // How long something has been open, by the clock: whole seconds, as it changes every second.
  function age(ms) { return ms < 60000 ? Math.max(0, Math.floor(ms / 1000)) + " s" : duration(ms); }

  // The whole while: the events read, first to last (on to now too, asked for with "to now").
  function fit() {
    const lo = state.lo === null ? Date.now() - 1000 : state.lo;
    let hi = state.hi === null ? lo + 1000 : state.hi;
    if (state.toNow) { hi = Math.max(hi, now()); }
    const span = Math.max(hi - lo, 10);
    state.d0 = lo - span * 0.01;
    state.d1 = lo + span * 1.04;
    state.fitted = true;
  }

  // The run a call is drawn under: its own. A call of no run that started (LangGraph's and the
  // Agents SDK's recorded tools carry run ids of their own, which no run.started names; an
  // Agents SDK handoff carries none) goes under the run that was running when it was asked for
  // (the one that started last, when runs nest), else under the first run of its turn in the
  // trajectory (LangGraph writes a node's run once it ran: the model's run that asked for the
  // tools); "" when none is known (the session's own). A call of no run id at all goes under
  // its turn's run before the time is asked.
  function home(call, known) {
    if (known.has(call.run)) { return call.run; }
    // A call of no run at all (an Agents SDK handoff, written with the turn's items) goes
    // under its turn's run first: its commit may land after the next run started.
    if (!call.run) {
      for (const run of call.turn || []) { if (known.has(run)) { return run; } }
    }
    let running = null;
    if (call.start !== undefined) {
      for (const run of state.runs) {
        const ended = run.ended_ms === null ? Infinity : run.ended_ms;
        if (run.started_ms <= call.start && call.start <= ended &&
            (running === null || run.started_ms >= running.started_ms)) { running = run; }
      }
    }
    if (running !== null) { return running.run; }
    for (const run of call.turn || []) { if (known.has(run)) { return run; } }
    return "";
  }

  // The rows, top to bottom: calls of no run the window knows (the session's own), then each
  // run in tree order with its calls under it, each group in the order the calls were made.
  function build() {
    const known = new Set(state.runs.map(function (r) { return r.run; }));
    const byRun = new Map();
    for (const call of state.calls.values()) {
      const under = home(call, known);
      const list = byRun.get(under) || [];
      list.push(call);
      byRun.set(under, list);
    }
    const made = function (a, b) {
      return (a.start === undefined ? -Infinity : a.start) - (b.start === undefined ? -Infinity : b.start);
    };
    // The slow easy to find: each run's calls the longest first (those still open first of all).
    const took = function (c) {
      return c.end === undefined ? Infinity : c.end - (c.start === undefined ? c.end : c.start);
    };
    const order = state.slowest ? function (a, b) { return took(b) - took(a) || made(a, b); } : made;
    const rows = [];
    const loose = byRun.get("") || [];
    if (loose.length) {
      rows.push({ kind: "group", label: "session", depth: 0 });
      loose.sort(order).forEach(function (c) { rows.push({ kind: c.kind, call: c, depth: 1, under: "" }); });
    }
    for (const run of state.runs) {
      rows.push({ kind: "run", run: run, depth: run.depth });
      (byRun.get(run.run) || []).sort(order).forEach(function (c) {
        rows.push({ kind: c.kind, call: c, depth: run.depth + 1, under: run.run });
      });
    }
    return rows;
  }

  function counts() { return counted(state.calls.size, "call") + " · " + counted(state.runs.length, "run"); }

  function render() {
    state.rows = build();
    if (state.fitted) { fit(); }
    wf.replaceChildren();
    const axis = el("div", "wf-axis");
    axis.append(el("div", "wf-label muted", counts()));
    const ticks = el("div", "wf-ticks");
    axis.append(ticks);
    wf.append(axis);
    const list = el("div", "wf-rows");
    if (!state.rows.length) { list.append(el("p", "muted", "no runs or calls in this window")); }
    for (const row of state.rows) { list.append(drawRow(row)); }
    wf.append(list);
    sizer.disconnect();
    sizer.observe(list);
    dragToPan(ticks);
    place();
    filter();
    range.textContent = visible(state.lo === null ? "" :
      clock(state.lo) + " – " + clock(state.hi) + " UTC · " + duration(state.hi - state.lo) +
      (state.older ? " (the newest " + counted(Number(cfg.window), "event") + " a window)" : ""));
  }

  function drawRow(row) {
    const node = el("div", "wf-row kind-" + row.kind);
    const label = el("div", "wf-label");
    label.style.paddingLeft = (8 + row.depth * 14) + "px";
    const track = el("div", "wf-track");
    node.append(label, track);
    row.node = node;
    if (row.kind === "group") {
      label.textContent = visible(row.label);
      label.classList.add("muted");
      return node;
    }
    row.bar = el("div", "wf-bar");
    row.dur = el("span", "wf-dur");
    track.append(row.bar, row.dur);
    if (row.kind === "run") {
      const run = row.run;
      node.dataset.run = run.run;
      node.classList.add("status-" + run.status);
      label.textContent = visible(run.agent + " · " + run.run);
      label.title = visible(run.objective || run.run);
      if (run.status !== "ok" && run.status !== "running") {
        label.append(el("span", "wf-mark badge " + run.status, run.status));
      }
      row.bar.classList.toggle("open", run.ended_ms === null && run.status === "running");
      say(row);
    } else {
      const call = row.call;
      node.dataset.attempt = call.id;
      node.dataset.run = call.run;
      node.dataset.under = row.under;
      node.dataset.tool = call.tool;
      label.textContent = visible(call.kind === "model" ? "model" + (call.model ? " " + call.model : "") : call.tool);
      label.title = visible(call.id);
      mark(row);
    }
    node.addEventListener("click", function (e) {
      if (!e.target.closest(".wf-track") || e.target === row.bar) { select(row); }
    });
    track.addEventListener("click", function (e) { if (e.target === track && !panned) { select(row); } });
    dragToPan(track);
    return node;
  }

  // A call's standing on its row: its status as a class, its duration (and tokens) beside it.
  function mark(row) {
    const call = row.call;
    const node = row.node;
    node.className = "wf-row kind-" + row.kind + " status-" + call.status + (row === state.selected ? " selected" : "");
    node.dataset.status = call.status;
    node.dataset.durationMs = call.end !== undefined && call.start !== undefined ? String(call.end - call.start) : "";
    const label = node.firstChild;
    const old = label.querySelector(".wf-mark");
    if (old) { old.remove(); }
    if (call.status === "unresolved" || call.status === "flagged" || call.status === "error") {
      label.append(el("span", "wf-mark badge " + call.status, call.status));
    }
    row.bar.classList.toggle("earlier", call.start === undefined);
    row.bar.classList.toggle("open", call.end === undefined);
    say(row);
  }

  // The text beside a bar. An open call's (or a running run's) says how long it has been open,
  // by the clock, on the newest page only: an earlier window's end is not the session's, a
  // call open there may have its result after it.
  function say(row) {
    let text;
    if (row.kind === "run") {
      const run = row.run;
      text = run.ended_ms !== null ? run.status + " · " + duration(run.ended_ms - run.started_ms)
        : run.status !== "running" ? run.status + ", never finished"
        : live ? "running for " + age(Date.now() - run.started_ms) : "running";
    } else {
      const call = row.call;
      if (call.end !== undefined) {
        text = call.start !== undefined ? duration(call.end - call.start) : "asked for before this window";
      } else {
        text = call.status === "flagged" ? "flagged, no result" : live ? "no result yet" : "no result by this window's end";
        if (live) {
          text += call.start !== undefined ? " · open for " + age(Date.now() - call.start) : " · open since before this window";
        }
      }
      if (call.tokens) { text += " · " + call.tokens; }
      text = (call.kind === "model" ? "" : call.tool + " · ") + text;
    }
    text = visible(text);
    if (row.dur.textContent === text) { return; }
    row.dur.textContent = text;
    row.bar.title = text;
    row.durWidth = undefined; // measured again where it is placed
  }

  function spanOf(row) {
    if (row.kind === "run") {
      const run = row.run;
      const end = run.ended_ms !== null ? run.ended_ms : (run.status === "running" ? openEnd() : Math.max(run.started_ms, state.hi || 0));
      return [run.started_ms, Math.max(run.started_ms, end)];
    }
    const call = row.call;
    const start = call.start !== undefined ? call.start : Math.min(state.lo, call.end);
    const end = call.end !== undefined ? call.end : openEnd();
    return [start, Math.max(start, end)];
  }

  // A label's width in pixels, measured on a canvas in the labels' font: measuring the element
  // would lay the page out for each row, and a hidden row (searched away) measures nothing.
  // The ticks' text is in the same font; the labels' padding is the stylesheet's, read once.
  // textWidth takes a node in the page: one not in it yet has no style to read the font from.
  let ruler = null;
  let labelPad = null;
  function textWidth(node) {
    if (!ruler) {
      const style = getComputedStyle(node);
      ruler = document.createElement("canvas").getContext("2d");
      ruler.font = [style.fontStyle, style.fontWeight, style.fontSize, style.fontFamily].join(" ");
    }
    return ruler.measureText(node.textContent).width;
  }
  function widthOf(row) {
    if (row.durWidth === undefined) {
      if (labelPad === null) {
        const style = getComputedStyle(row.dur);
        labelPad = (parseFloat(style.paddingLeft) || 0) + (parseFloat(style.paddingRight) || 0);
      }
      row.durWidth = Math.ceil(textWidth(row.dur) + labelPad) + 2;
    }
    return row.durWidth;
  }

  // Bars and ticks where the while on screen puts them: on a zoom or a pan, only this runs.
  // A bar's label goes where it fits whole: after the bar, else inside it, else before it, else
  // over the bar from its start, moved left as far as it must; never cut at the track's edge.
  function placeRow(row) {
    if (!row.bar) { return; }
    const span = state.d1 - state.d0;
    const [start, end] = spanOf(row);
    const left = (start - state.d0) / span * 100;
    const right = (end - state.d0) / span * 100;
    row.bar.style.left = left + "%";
    row.bar.style.width = Math.max(0, right - left) + "%";
    const W = trackWidth;
    const w = widthOf(row);
    const gap = 4;
    const a = Math.max(left / 100 * W, 0);   // the bar's part on screen, in pixels
    const b = Math.min(right / 100 * W, W);
    let at;
    let inside = false;
    if (b < 0) { at = gap; }
    else if (a > W) { at = W - w - gap; }
    else if (W - b >= w + 2 * gap) { at = b + gap; }
    else if (b - a >= w + 2 * gap) { at = a + gap; inside = true; }
    else if (a >= w + 2 * gap) { at = a - gap - w; }
    else { at = Math.min(a + gap, W - w - gap); inside = true; }
    row.dur.style.left = Math.max(at, 0) + "px";
    row.dur.classList.toggle("inside", inside);
  }

  function place() {
    const span = state.d1 - state.d0;
    state.rows.forEach(placeRow);
    const ticks = wf.querySelector(".wf-ticks");
    if (!ticks) { return; }
    ticks.replaceChildren();
    const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4,
      3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 216e5, 432e5, 864e5];
    const width = Math.max(trackWidth, 200);
    const step = steps.find(function (s) { return s / span * width >= 90; }) || steps[steps.length - 1];
    for (let t = Math.ceil(state.d0 / step) * step; t <= state.d1; t += step) {
      const tick = el("span", "wf-tick", clock(t, step < 1000));
      tick.style.left = ((t - state.d0) / span * 100) + "%";
      ticks.append(tick);
      // A tick whose time would be cut at the axis's end is left out: its line alone says nothing.
      if ((t - state.d0) / span * width + 3 + textWidth(tick) > width) { tick.remove(); break; }
    }
    root.dataset.from = String(Math.round(state.d0));
    root.dataset.to = String(Math.round(state.d1));
  }

  // -- zoom, pan, search --------------------------------------------------------------------

  function zoom(factor, at) {
    const span = state.d1 - state.d0;
    const next = Math.min(Math.max(span * factor, 2), 3e10);
    const centre = at === undefined ? state.d0 + span / 2 : at;
    state.d0 = centre - (centre - state.d0) * (next / span);
    state.d1 = state.d0 + next;
    state.fitted = false;
    place();
  }
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("zoom-fit").addEventListener("click", function () { fit(); place(); });
  // The axis to now, open calls and running runs drawn on to it (the newest page only: an
  // earlier window ends where it ends).
  const toNow = document.getElementById("trace-to-now");
  toNow.hidden = !live;
  toNow.addEventListener("click", function () {
    state.toNow = !state.toNow;
    toNow.setAttribute("aria-pressed", String(state.toNow));
    fit();
    place();
  });
  wf.addEventListener("wheel", function (e) {
    const track = e.target.closest(".wf-track, .wf-ticks");
    if (!track) { return; }
    const box = track.getBoundingClientRect();
    const span = state.d1 - state.d0;
    if (e.ctrlKey || e.metaKey) { // zoom where the pointer is
      e.preventDefault();
      zoom(e.deltaY > 0 ? 1.25 : 0.8, state.d0 + (e.clientX - box.left) / box.width * span);
    } else if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) { // pan
      e.preventDefault();
      const by = (e.shiftKey ? e.deltaY : e.deltaX) / box.width * span;
      state.d0 += by; state.d1 += by; state.fitted = false;
      place();
    }
  }, { passive: false });

  let panned = false;
  function dragToPan(track) {
    track.addEventListener("pointerdown", function (e) {
      if (e.button !== 0 || e.target.classList.contains("wf-bar")) { return; }
      const box = track.getBoundingClientRect();
      const x0 = e.clientX;
      const d0 = state.d0;
      const span = state.d1 - state.d0;
      panned = false;
      function move(m) {
        const dx = m.clientX - x0;
        if (Math.abs(dx) > 3) { panned = true; track.classList.add("dragging"); }
        if (!panned) { return; }
        state.d0 = d0 - dx / box.width * span;
        state.d1 = state.d0 + span;
        state.fitted = false;
        place();
      }
      function up() {
        track.classList.remove("dragging");
        window.removeEventListener("pointermove", move);
        window.removeEventListener("pointerup", up);
        setTimeout(function () { panned = false; }, 0);
      }
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", up);
    });
  }

  const slowest = document.getElementById("trace-slowest");
  slowest.addEventListener("click", function () {
    state.slowest = !state.slowest;
    slowest.setAttribute("aria-pressed", String(state.slowest));
    render();
  });

  const search = document.getElementById("trace-search");
  search.addEventListener("input", function () { state.query = search.value.trim().toLowerCase(); filter(); });
  // Rows whose call (its tool, id, arguments, agent, model) holds the search; a run stays while
  // one of its calls does, or it does itself.
  function filter() {
    const q = state.query;
    let run = null;
    let runShown = false;
    for (const row of state.rows) {
      if (row.kind === "run" || row.kind === "group") {
        if (run) { run.node.hidden = q !== "" && !runShown; }
        run = row;
        const own = row.kind === "run" ? (row.run.run + " " + row.run.agent + " " + (row.run.objective || "")) : "";
        runShown = q === "" || own.toLowerCase().includes(q);
        continue;
      }
      const call = row.call;
      const text = [call.tool, call.id, call.text, call.agent, call.model, call.status].join(" ").toLowerCase();
      const shown = q === "" || text.includes(q);
      row.node.hidden = !shown;
      runShown = runShown || shown;
    }
    if (run) { run.node.hidden = q !== "" && !runShown; }
  }

  // -- a click: the event and its pair ------------------------------------------------------

  function eventUrl(cursor) { return cfg.sessionPath + "/e/" + encodeURIComponent(cursor); }

  function select(row) {
    if (state.selected && state.selected.node) { state.selected.node.classList.remove("selected"); }
    state.selected = row;
    row.node.classList.add("selected");
    detail.hidden = false;
    detail.parentElement.classList.remove("no-detail");
    place(); // the waterfall is narrower beside the detail: its ticks are spaced again
    detail.replaceChildren();
    const close = el("button", "", "close");
    close.style.float = "right";
    close.addEventListener("click", function () {
      detail.hidden = true;
      detail.parentElement.classList.add("no-detail");
      row.node.classList.remove("selected");
      state.selected = null;
      place();
    });
    detail.append(close);
    if (row.kind === "run") {
      const run = row.run;
      detail.append(el("h3", "", run.agent + " · run " + run.run));
      const facts = el("p");
      facts.append(el("span", "badge " + run.status, run.status), " ",
        run.ended_ms !== null ? duration(run.ended_ms - run.started_ms) : "since " + clock(run.started_ms, true));
      detail.append(facts);
      if (run.objective) { detail.append(el("p", "", run.objective)); }
      if (run.parent) { detail.append(el("p", "muted", "delegated by " + run.parent)); }
      const link = el("a", "", "its events");
      link.href = cfg.sessionPath + "?run=" + encodeURIComponent(run.run);
      detail.append(link);
      return;
    }
    const call = row.call;
    detail.append(el("h3", "", (call.kind === "model" ? "model call" : call.tool) + " · " + call.id));
    const facts = el("p");
    facts.append(el("span", "badge " + call.status, call.status), " ",
      call.start !== undefined && call.end !== undefined ? duration(call.end - call.start)
        : call.end === undefined && call.start !== undefined && live ? "open for " + age(Date.now() - call.start) : "");
    if (call.tokens) { facts.append(" · " + call.tokens); }
    if (call.run) { facts.append(" · run " + call.run); }
    detail.append(facts);
    if (call.settledBy) {
      // A reconciler's probe, not the call, found this outcome: say which, and on what evidence.
      const by = call.settledBy;
      detail.append(el("p", "settled-by", "settled by the probe " + by.probe + " (" + by.state + ", " + by.at + "): " + JSON.stringify(by.evidence)));
    }
    const parts = [["request", call.requested, "request"], [call.settledBy ? "result, settled by a probe" : "result", call.settled, "result"], ["flagged by the reconciler", call.flagged, "flagged"]];
    for (const [name, cursor, part] of parts) {
      if (!cursor) { continue; }
      const head = el("h3", "", name + " · ");
      const link = el("a", "", clock(cursorMs(cursor), true));
      link.href = eventUrl(cursor);
      head.append(link);
      const pre = el("pre", "", "…");
      pre.dataset.part = part;
      detail.append(head, pre);
      fetch(eventUrl(cursor) + "?format=json").then(function (r) { return r.json(); })
        .then(function (data) { pre.textContent = visible(JSON.stringify(data, null, 2)); })
        .catch(function () { pre.textContent = visible("could not read it"); });
    }
    if (!call.settled && !call.flagged) { detail.append(el("p", "muted", "no result yet")); }
  }

  // -- live -------------------------------------------------------------------------------

  // Rows arriving together are drawn once, in the next frame: the row reaches the table first.
  let placing = false;
  function placeSoon() {
    if (placing) { return; }
    placing = true;
    requestAnimationFrame(function () { placing = false; if (state.fitted) { fit(); } place(); });
  }
  let rendering = false;
  function renderSoon() {
    if (rendering) { return; }
    rendering = true;
    requestAnimationFrame(function () { rendering = false; render(); });
  }

  // A request opens a bar; its result closes it, where a reload would draw it.
  document.addEventListener("ledger:row", function (e) {
    const tr = e.detail;
    const at = cursorMs(tr.dataset.cursor);
    state.hi = Math.max(state.hi === null ? at : state.hi, at);
    if (state.lo === null) { state.lo = at; }
    const type = tr.dataset.type;
    if (type !== "tool_call" && type !== "tool_result") {
      if (state.fitted) { placeSoon(); }
      return;
    }
    const run = tr.dataset.run || "";
    const id = tr.dataset.attempt;
    const key = keyOf(run, id);
    if (type === "tool_call") {
      if (state.calls.has(key)) { return; }
      // Its turn, as a reload reads it from the trajectory: the latest model call's run.
      addCall({ run: run, requested: tr.dataset.cursor, status: "unresolved" }, id, tr.dataset.tool,
        tr.dataset.tool === "model" ? "model" : "tool", { agent: tr.dataset.agent, text: "", turn: latestModelRun() });
      if (state.slowest || (!rendering && !insert(state.calls.get(key)))) { renderSoon(); }
      return;
    }
    const call = state.calls.get(key);
    if (!call) {
      addCall({ run: run, settled: tr.dataset.cursor, status: tr.dataset.status }, id, tr.dataset.tool, "tool", {});
      renderSoon();
      return;
    }
    call.settled = tr.dataset.cursor;
    call.end = at;
    call.status = tr.dataset.status;
    if (tr.dataset.tokens) { call.tokens = tr.dataset.tokens; }
    if (rendering) { return; } // the render to come draws it as it is now
    const row = state.rows.find(function (r) { return r.call === call; });
    if (row) { mark(row); }
    placeSoon();
  });
  function latestModelRun() {
    let latest = null;
    for (const call of state.calls.values()) {
      if (call.kind === "model" && call.start !== undefined && (latest === null || call.start >= latest.start)) { latest = call; }
    }
    return latest === null ? [] : [latest.run];
  }
  // The runs of the while change with events of their own streams: read again with the panels.
  // A call that came live goes in as one row, last under its run (calls come in the order they
  // were made), drawn alone: the other rows stay as they are. False when it has no place yet
  // (its run not in the tree, no rows): then the whole waterfall is drawn again.
  function insert(call) {
    const rows = state.rows;
    const under = home(call, new Set(state.runs.map(function (r) { return r.run; })));
    let at = -1;
    let depth = 1;
    if (rows.length && rows[0].kind === "group" && under === "") {
      at = 0;
    } else {
      at = rows.findIndex(function (r) { return r.kind === "run" && r.run.run === under; });
      if (at < 0) { return false; }
      depth = rows[at].run.depth + 1;
    }
    while (at + 1 < rows.length && rows[at + 1].call) { at += 1; }
    const row = { kind: call.kind, call: call, depth: depth, under: under };
    rows.splice(at + 1, 0, row);
    rows[at].node.after(drawRow(row));
    placeRow(row);
    const label = wf.querySelector(".wf-axis .wf-label");
    if (label) { label.textContent = counts(); }
    filter();
    if (state.fitted) { placeSoon(); }
    return true;
  }

  // Only when the runs panel changed: ten open pages asking after every row would load the server.
  let runsSeen = null;
  document.addEventListener("ledger:panels", function () {
    const panel = document.getElementById("runs");
    const seen = panel ? panel.textContent : "";
    if (seen === runsSeen) { return; }
    runsSeen = seen;
    readRuns().then(function (changed) { if (changed) { render(); } });
  });
  // What is open says for how long, every second; with "to now" its bar grows with the clock.
  if (live) {
    setInterval(function () {
      if (!hasOpen() || root.hidden) { return; }
      for (const row of state.rows) {
        if (row.dur && (row.call ? row.call.end === undefined : row.run && row.run.status === "running")) { say(row); }
      }
      placeSoon();
    }, 1000);
  }
  function hasOpen() {
    for (const call of state.calls.values()) { if (call.end === undefined) { return true; } }
    return state.runs.some(function (r) { return r.status === "running"; });
  }

  earlier.addEventListener("click", function () {
    earlier.disabled = true;
    readWindow(state.older).then(function () {
      earlier.disabled = false;
      fit();
      render();
      if (!conversationPanel.hidden) { converse(); }
    });
  });

  // -- the conversation ---------------------------------------------------------------------

  const conversationPanel = document.getElementById("conversation-panel");
  const conversation = document.getElementById("conversation");
  const tabs = { trace: document.getElementById("tab-trace"), conversation: document.getElementById("tab-conversation") };
  function show(which) {
    root.hidden = which !== "trace";
    conversationPanel.hidden = which !== "conversation";
    tabs.trace.setAttribute("aria-selected", String(which === "trace"));
    tabs.conversation.setAttribute("aria-selected", String(which === "conversation"));
    if (which === "conversation") { converse(); } else { place(); }
  }
  tabs.trace.addEventListener("click", function () { show("trace"); });
  tabs.conversation.addEventListener("click", function () { show("conversation"); });

  function short(text, n) { return text.length > n ? text.slice(0, n) + "…" : text; }

  function converse() {
    conversation.replaceChildren();
    if (state.older) {
      conversation.append(el("p", "muted", "the newest " + counted(Number(cfg.window), "event") + ": “earlier events” on the trace reads further back"));
    }
    let turns = 0;
    for (const doc of state.docs) { turns += steps(doc, conversation); }
    if (!turns) { conversation.append(el("p", "muted", "nothing said in this window")); }
  }

  function steps(trajectory, into) {
    let turns = 0;
    for (const step of trajectory.steps || []) {
      const extra = step.extra || {};
      const who = step.source === "agent" ? (extra.agent || "agent") : step.source;
      const turn = el("div", "turn " + step.source);
      const head = el("div", "who", who + (step.model_name ? " · " + step.model_name : "") +
        (step.metrics ? " · " + tokensOf(step.metrics) : "") +
        (step.timestamp ? " · " + clock(Date.parse(step.timestamp), false) : ""));
      turn.append(head);
      if (step.message) { turn.append(el("div", "bubble", step.message)); }
      const results = new Map();
      for (const r of (step.observation && step.observation.results) || []) { results.set(r.source_call_id, r); }
      for (const call of step.tool_calls || []) {
        const ledger = (call.extra && call.extra.ledger) || {};
        const box = el("details", "tool");
        const took = ledger.requested && ledger.settled ? " · " + duration(cursorMs(ledger.settled) - cursorMs(ledger.requested)) : "";
        const args = JSON.stringify(call.arguments);
        box.append(el("summary", "", call.function_name + "(" + short(args, 80) + ") → " + (ledger.status || "") + took));
        box.append(el("pre", "", JSON.stringify(call.arguments, null, 2)));
        const result = results.get(call.tool_call_id);
        if (result && result.content !== undefined) { box.append(el("pre", "", result.content)); }
        turn.append(box);
      }
      if (step.message || (step.tool_calls && step.tool_calls.length)) { into.append(turn); turns += 1; }
    }
    for (const sub of trajectory.subagent_trajectories || []) {
      const box = el("div", "subagent");
      box.append(el("div", "who", "delegated: " + sub.agent.name + " · " + sub.trajectory_id));
      turns += steps(sub, box);
      into.append(box);
    }
    return turns;
  }

  // -- start --------------------------------------------------------------------------------

  readWindow(cfg.before).then(function () { fit(); render(); root.dataset.ready = "1"; })
    .catch(function (err) { wf.replaceChildren(el("p", "muted", String(err))); });
})();
