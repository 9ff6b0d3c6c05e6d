// A session's newest page, live: rows from Server-Sent Events whose ids are ledger cursors (a
// reconnect resumes after the last one this page has: no gap, no duplicate), and the panels
// (open calls, runs, board, groups) fetched again every few seconds and soon after each row.
"use strict";
(function () {
  const config = document.currentScript.dataset;
  const view = window.LedgerView;
  const body = document.querySelector("#timeline tbody");
  const badge = document.getElementById("live");
  const liveUrl = config.live;
  let lastId = config.after; // the newest cursor this page has: the stream goes on after it
  let source = null;
  // Whether the page is scrolled to the bottom (the end of the timeline in view), kept by an
  // observer: asking for it on each new row would make the browser lay the page out first.
  let following = true;
  new IntersectionObserver(function (entries) { following = entries[0].isIntersecting; })
    .observe(document.getElementById("end"));
  let scrolling = false;

  // A browser keeps six connections to a server over HTTP/1.1, for all its tabs: a hidden page
  // gives its stream back, and opens it again when shown, after the last cursor it has.
  function connect() {
    const sep = liveUrl.endsWith("?") ? "" : "&";
    source = new EventSource(liveUrl + sep + "after=" + encodeURIComponent(lastId));
    source.onopen = function () { badge.textContent = "live"; badge.className = "on"; };
    source.onerror = function () { badge.textContent = "reconnecting"; badge.className = "off"; };
    source.addEventListener("row", onRow);
    source.addEventListener("skip", function (message) { lastId = message.lastEventId; });
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden && source) {
      source.close(); source = null; badge.textContent = "paused"; badge.className = "off";
    } else if (!document.hidden && !source) {
      connect();
    }
  });

  // A result whose call is on the page joins the call's row, as a reload shows it: its
  // status, how long the call took, a model call's tokens. True when it joined.
  function joinCall(tr) {
    const call = body.querySelector('tr[data-type="tool_call"][data-attempt="' +
      CSS.escape(tr.dataset.attempt) + '"]');
    if (!call) { return false; }
    const outcome = call.querySelector("td.outcome");
    outcome.replaceChildren();
    const status = document.createElement("span");
    status.className = "badge " + (tr.dataset.status === "ok" ? "ok" : "error");
    status.textContent = tr.dataset.status;
    const took = document.createElement("span");
    took.className = "duration muted";
    took.textContent = view.duration(view.cursorMs(tr.dataset.cursor) - view.cursorMs(call.dataset.cursor));
    outcome.append(status, " ", took);
    if (tr.dataset.tokens) {
      const tokens = document.createElement("span");
      tokens.className = "tokens muted";
      tokens.textContent = tr.dataset.tokens;
      outcome.append(" ", tokens);
    }
    return true;
  }

  let received = 0; // rows the stream delivered, duplicates included: what a test counts
  function onRow(message) {
    lastId = message.lastEventId;
    received += 1;
    document.body.dataset.received = String(received);
    const follow = following;
    const holder = document.createElement("tbody");
    holder.innerHTML = message.data; // rendered and escaped by the server
    const tr = holder.firstElementChild;
    if (!tr || document.getElementById(tr.id)) { return; } // shown already
    if (tr.dataset.type === "tool_result") {
      const listed = document.querySelector('#open tr[data-attempt="' + CSS.escape(tr.dataset.attempt) + '"]');
      if (listed) { listed.remove(); }
      if (joinCall(tr)) { told(tr); refreshSoon(); return; }
    }
    body.appendChild(tr);
    told(tr);
    if (follow && !scrolling) { // once a frame, however many rows came in it
      scrolling = true;
      requestAnimationFrame(function () {
        scrolling = false;
        document.getElementById("end").scrollIntoView({ block: "end" });
      });
    }
    refreshSoon();
  }
  connect();
  // The trace hears of each row once it is in the table (it draws in a frame of its own).
  function told(tr) { document.dispatchEvent(new CustomEvent("ledger:row", { detail: tr })); }

  // The panels change without an event too (an ack, a lease running out). Each section of
  // /panels replaces the section of the same id, wherever the page shows it.
  let timer = null;
  function refresh() {
    timer = null;
    fetch(config.panels).then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        const fresh = document.createElement("template");
        fresh.innerHTML = html;
        for (const section of fresh.content.querySelectorAll("section[id]")) {
          const old = document.getElementById(section.id);
          if (old) { old.replaceWith(section); }
        }
        document.dispatchEvent(new CustomEvent("ledger:panels"));
      })
      .catch(function () {});
  }
  function refreshSoon() { if (timer === null) { timer = setTimeout(refresh, 300); } }
  setInterval(refreshSoon, Number(config.refreshMs));
})();
