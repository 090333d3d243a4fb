// The live inspector: the list of the relay's live and recent sessions above the inspector, and
// the session picked in it, fed as it happens (a snapshot, then deltas, over one WebSocket).
// The token: from the address's fragment (#token=..., never sent to a server) or the form, kept in
// this tab's sessionStorage; sent as a Bearer header to {base}/sessions and as the token
// subprotocol (beside relay-inspector) when the feed opens, as realtime browser clients send it.
"use strict";
(function () {
  const config = JSON.parse(document.getElementById("live-config").textContent);
  const KEY = "relay-inspector-token";
  const inspector = window.inspector;
  const live = { socket: null, watching: null, shown: null, follow: true, sessions: { live: [], recent: [] },
                 retry: null, connectedOnce: false };

  // ---- the panel ---------------------------------------------------------------------------
  const panel = document.createElement("nav");
  panel.id = "live";
  panel.innerHTML =
    `<div class="bar"><b>relay: live sessions</b> <span id="live-status" data-state="starting">starting…</span>` +
    ` <span id="live-watch"></span></div>` +
    `<form id="live-login" hidden><label>relay token <input id="live-token" type="password" autocomplete="off"></label>` +
    ` <button type="submit">open</button> <span class="why"></span></form>` +
    `<table id="live-sessions" hidden><thead><tr><th></th><th>session</th><th>mode</th><th>dialect</th><th>started</th>` +
    `<th>state</th><th>recorded</th></tr></thead><tbody></tbody></table>`;
  document.body.insertBefore(panel, document.body.firstChild);
  document.body.dataset.live = "empty";   // the inspector below shows once a session is open
  const $ = (id) => document.getElementById(id);

  function status(state, text) {
    const element = $("live-status");
    element.dataset.state = state;
    element.textContent = text;
  }

  // ---- the token ---------------------------------------------------------------------------
  function fragment() {
    const found = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      const at = part.indexOf("=");
      if (at > 0) found[decodeURIComponent(part.slice(0, at))] = decodeURIComponent(part.slice(at + 1));
    }
    return found;
  }
  const given = fragment();
  if (given.token !== undefined) {
    sessionStorage.setItem(KEY, given.token);
    history.replaceState(null, "", location.pathname + location.search + (given.session ? "#session=" + encodeURIComponent(given.session) : ""));
  }
  const token = () => sessionStorage.getItem(KEY) || "";

  $("live-login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("live-token").value);
    $("live-token").value = "";
    start();
  });

  function askForToken(why) {
    const form = $("live-login");
    form.hidden = false;
    form.querySelector(".why").textContent = why;
  }

  // ---- the list ----------------------------------------------------------------------------
  function renderList() {
    const rows = [];
    const row = (s) => {
      const state = s.live ? "live" : `ended${s.end_reason ? " (" + s.end_reason + ")" : ""}`;
      return `<tr data-session="${escapeHtml(s.id)}" data-live="${s.live ? 1 : 0}" class="${s.id === live.watching ? "watched" : ""}">` +
        `<td><span class="dot ${s.live ? "on" : ""}"></span></td><td class="id">${escapeHtml(s.id)}` +
        (s.call_id ? ` <small>${escapeHtml(s.call_id)}</small>` : "") + `</td><td>${escapeHtml(s.mode)}</td>` +
        `<td>${escapeHtml(s.dialect)}</td><td>${escapeHtml(localTime(s.started_at))}</td><td>${escapeHtml(state)}</td>` +
        `<td>${s.recorded ? "yes" : "no"}</td></tr>`;
    };
    if (live.sessions.live.length) rows.push(`<tr class="group"><td colspan="7">live (${live.sessions.live.length})</td></tr>`, ...live.sessions.live.map(row));
    if (live.sessions.recent.length) rows.push(`<tr class="group"><td colspan="7">recent (${live.sessions.recent.length})</td></tr>`, ...live.sessions.recent.map(row));
    if (!rows.length) rows.push(`<tr class="group"><td colspan="7">no session yet: they show here as they start</td></tr>`);
    document.querySelector("#live-sessions tbody").innerHTML = rows.join("");
    $("live-sessions").hidden = false;
  }

  document.querySelector("#live-sessions tbody").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-session]");
    if (tr) watch(tr.dataset.session);
  });

  function watch(id) {
    live.watching = id;
    panel.dataset.watching = id;
    history.replaceState(null, "", location.pathname + location.search + "#session=" + encodeURIComponent(id));
    $("live-watch").textContent = `opening ${id}…`;
    renderList();
    if (live.socket && live.socket.readyState === WebSocket.OPEN) live.socket.send(JSON.stringify({ type: "watch", session: id }));
  }

  // ---- the feed ----------------------------------------------------------------------------
  async function start() {
    clearTimeout(live.retry);
    status("connecting", "connecting…");
    const headers = token() ? { Authorization: "Bearer " + token() } : {};
    let response;
    try {
      response = await fetch(config.base + "/sessions", { headers, cache: "no-store" });
    } catch (error) {
      status("disconnected", `the relay cannot be reached (${error}); retrying`);
      live.retry = setTimeout(start, 3000);
      return;
    }
    if (response.status === 401) {
      status("unauthorized", token() ? "401: wrong relay token" : "401: the relay token is needed");
      askForToken(token() ? "that token was refused (401)" : "");
      return;
    }
    if (!response.ok) {
      status("refused", `${response.status}: ${(await response.json().catch(() => ({}))).error?.message || response.statusText}`);
      return;
    }
    $("live-login").hidden = true;
    live.sessions = await response.json();
    renderList();
    connect();
  }

  function connect() {
    const protocols = [config.subprotocol];
    if (token()) protocols.push(config.token_subprotocol + token());
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + config.base + "/feed";
    let socket;
    try {
      socket = new WebSocket(url, protocols);
    } catch (error) {
      status("refused", `this token cannot be sent by a browser (a WebSocket subprotocol takes letters, digits and !#$%&'*+-.^_\`|~ only): ${error.message}`);
      return;
    }
    live.socket = socket;
    socket.onopen = () => {
      live.connectedOnce = true;
      status("connected", "connected");
      const wanted = live.watching || fragment().session;
      if (wanted) watch(wanted);
    };
    socket.onmessage = (ev) => receive(JSON.parse(ev.data));
    socket.onclose = (ev) => {
      if (live.socket !== socket) return;
      live.socket = null;
      status("disconnected", `the feed closed (${ev.code}${ev.reason ? " " + ev.reason : ""}); reconnecting`);
      live.retry = setTimeout(start, 3000);
    };
  }

  function receive(message) {
    if (message.type === "sessions") {
      live.sessions = { live: message.live, recent: message.recent };
      renderList();
    } else if (message.type === "snapshot" && message.session === live.watching) {
      inspector.reset();
      live.follow = true;
      live.shown = message.session;
      inspector.state.audioDelay = 3000;
      inspector.append(message.model);
      panel.dataset.shown = message.session;
      document.body.dataset.live = "shown";
      describe(message.facts, message.model.live);
    } else if (message.type === "delta" && message.session === live.shown) {
      inspector.append(message.delta);
      if (live.follow) inspector.fit();
      if (message.ended) describe(message.ended);
    } else if (message.type === "unavailable" && message.session === live.watching) {
      inspector.reset();
      live.shown = message.session;
      panel.dataset.shown = message.session;
      document.body.dataset.live = "empty";
      $("live-watch").textContent = `${message.session}: ${message.message}`;
    } else if (message.type === "error") {
      $("live-watch").textContent = message.message;
      if (message.session && message.session === live.shown) live.shown = null;
    }
  }

  function describe(facts, since) {
    if (!facts) return;
    let text = `${facts.live ? "watching" : "showing"} ${facts.id}` +
      (facts.live ? " as it happens" : `: ended${facts.end_reason ? " (" + facts.end_reason + ")" : ""}`);
    if (since && since.since !== undefined) text += `; not recorded, so from ${since.since.toFixed(1)} s on (when you opened it)`;
    $("live-watch").textContent = text;
  }

  // the timeline follows a live session until the person zooms; "fit" follows again
  $("zoom-in").addEventListener("click", () => { live.follow = false; });
  $("zoom-out").addEventListener("click", () => { live.follow = false; });
  $("zoom-fit").addEventListener("click", () => { live.follow = true; });
  $("timeline").addEventListener("wheel", (ev) => { if (ev.ctrlKey || ev.metaKey) live.follow = false; }, { passive: true });

  // ---- helpers -------------------------------------------------------------------------------
  function escapeHtml(value) {
    return String(value === undefined || value === null ? "" : value).replace(/[&<>"']/g,
      (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function localTime(iso) {
    const date = new Date(iso);
    return isNaN(date) ? String(iso || "") : date.toLocaleString();
  }

  window.liveInspector = { state: live, watch };
  start();
})();
