// The relay's session inspector. Renders from one model (embedded as JSON in the page) and takes
// more of it through `inspector.append(delta)`, which is how the live view (live.js) feeds it, and
// `inspector.reset()` when it shows another session. Only what is in view is put in the DOM, so
// sessions of an hour stay smooth.
"use strict";
(function () {
  const LANE_H = 22, ROW_H = 19, MAX_ROWS = 6, MIN_EVENT_PX = 4, POINT_PX = 8, AXIS_H = 22;
  const LABEL_PX = 96, LABEL_GAP = 3;   // the room beside a bar too short for its label
  const AUDIO_LANES = { caller: true, assistant: true };
  const state = {
    source: {}, lanes: [], duration: 0, frames: [], events: new Map(), order: [], summary: {},
    audio: { caller: emptySide(), assistant: emptySide() }, audioNote: null, warnings: [],
    replay: null, selected: null, pxPerSec: 0, fitted: false, rows: new Map(), laneRows: new Map(),
    timings: { renders: [] }, renderQueued: false, audioDirty: { caller: true, assistant: true },
    // how long audio that grows (a live view) waits before its player is rebuilt; never while it plays
    audioDelay: 50, audioTimers: {},
  };
  const $ = (id) => document.getElementById(id);
  const timeline = $("timeline"), inner = $("timeline-inner"), lanesBox = $("lanes"), axis = $("axis");

  function emptySide() {
    return { rate: null, source: null, samples: 0, segments: [], levels: new Uint8Array(0), chunks: [], pending: [],
             playable: false, recorded_seconds: 0, url: null };
  }

  // ---- merging a model or a delta ----------------------------------------------------------
  function append(delta) {
    if (!delta) return;
    if (delta.source) state.source = delta.source;
    if (delta.lanes) state.lanes = delta.lanes;
    if (typeof delta.duration === "number") state.duration = Math.max(state.duration, delta.duration);
    if (delta.frames) {
      const from = typeof delta.frames_from === "number" ? delta.frames_from : state.frames.length;
      for (let i = 0; i < delta.frames.length; i++) state.frames[from + i] = delta.frames[i];
    }
    for (const event of delta.events || []) {
      if (!state.events.has(event.id)) state.order.push(event.id);
      state.events.set(event.id, event);
    }
    if (delta.summary) state.summary = delta.summary;
    if ("audio_note" in delta) state.audioNote = delta.audio_note;
    if (delta.warnings) state.warnings = delta.warnings;
    if (delta.replay) state.replay = delta.replay;
    for (const side of ["caller", "assistant"]) {
      const part = delta.audio && delta.audio[side];
      if (!part) continue;
      const track = state.audio[side];
      track.rate = part.rate; track.source = part.source; track.samples = part.samples;
      track.playable = part.playable; track.recorded_seconds = part.recorded_seconds;
      track.segments.splice(part.segments_from || 0, Infinity, ...part.segments);
      const levels = decodeBase64(part.levels || "");
      const from = part.levels_from || 0;
      const merged = new Uint8Array(from + levels.length);
      merged.set(track.levels.subarray(0, from)); merged.set(levels, from);
      track.levels = merged;
      if (part.data) { track.pending.push(part.data); state.audioDirty[side] = true; }
    }
    state.laneRows.clear();
    scheduleRender(true);
  }

  function reset() {
    // another session: forget this one (a build of its audio in progress stops at its next slice)
    for (const side of ["caller", "assistant"]) {
      const track = state.audio[side], player = $("player-" + side);
      track.build = (track.build || 0) + 1;
      if (track.url) URL.revokeObjectURL(track.url);
      clearTimeout(state.audioTimers[side]); state.audioTimers[side] = null;
      player.pause(); player.removeAttribute("src"); player.parentElement.hidden = true;
      state.audio[side] = emptySide(); state.audioDirty[side] = true;
    }
    Object.assign(state, { source: {}, duration: 0, frames: [], events: new Map(), order: [], summary: {},
                           audioNote: null, warnings: [], replay: null, selected: null, fitted: false, labelsHtml: null });
    state.laneRows.clear();
    $("detail").innerHTML = '<p class="hint">Click an event on the timeline to see its frames.</p>';
    $("selection-line").hidden = true;
    scheduleRender(true);
  }

  function decodeBase64(text) {
    const binary = atob(text.replace(/\s+/g, ""));
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  // ---- audio: mu-law chunks -> a PCM16 WAV the <audio> element plays ------------------------
  const ULAW = new Int16Array(256);
  for (let i = 0; i < 256; i++) {
    const u = ~i & 0xff, magnitude = (((u & 0x0f) << 3) + 0x84) << ((u >> 4) & 7);
    ULAW[i] = u & 0x80 ? 0x84 - magnitude : magnitude - 0x84;
  }

  // Decoding runs in slices between frames: an hour of audio must not hold up the timeline.
  const SLICE = 1 << 19, BASE64_SLICE = 1 << 20;   // ~5 ms of work each
  function nextFrame() { return new Promise((resolve) => setTimeout(resolve, 0)); }

  async function buildAudio(side) {
    const track = state.audio[side];
    const player = $("player-" + side);
    state.audioDirty[side] = false;
    const build = (track.build || 0) + 1;
    track.build = build;
    if (!track.playable) { player.parentElement.hidden = true; return; }
    while (track.pending.length) {
      const text = track.pending.shift();
      for (let at = 0; at < text.length; at += BASE64_SLICE) {
        track.chunks.push(decodeBase64(text.slice(at, at + BASE64_SLICE)));
        await nextFrame();
        if (track.build !== build) return;
      }
    }
    const total = track.chunks.reduce((n, c) => n + c.length, 0);
    if (!total) { player.parentElement.hidden = true; return; }
    const wav = new DataView(new ArrayBuffer(44 + total * 2));
    const text = (offset, value) => { for (let i = 0; i < value.length; i++) wav.setUint8(offset + i, value.charCodeAt(i)); };
    text(0, "RIFF"); wav.setUint32(4, 36 + total * 2, true); text(8, "WAVEfmt ");
    wav.setUint32(16, 16, true); wav.setUint16(20, 1, true); wav.setUint16(22, 1, true);
    wav.setUint32(24, track.rate, true); wav.setUint32(28, track.rate * 2, true);
    wav.setUint16(32, 2, true); wav.setUint16(34, 16, true); text(36, "data"); wav.setUint32(40, total * 2, true);
    const samples = new Int16Array(wav.buffer, 44, total);
    let at = 0;
    for (const chunk of track.chunks) {
      for (let start = 0; start < chunk.length; start += SLICE) {
        const end = Math.min(chunk.length, start + SLICE);
        for (let i = start; i < end; i++) samples[at++] = ULAW[chunk[i]];
        await nextFrame();
        if (track.build !== build) return;
      }
    }
    if (track.url) URL.revokeObjectURL(track.url);
    const position = player.currentTime || 0;
    track.url = URL.createObjectURL(new Blob([wav.buffer], { type: "audio/wav" }));
    player.src = track.url;
    if (position) player.currentTime = position;
    player.parentElement.hidden = false;
    player.parentElement.querySelector(".source").textContent =
      `${track.source} recorded, ${formatSeconds(track.recorded_seconds)}; played at ${track.rate} Hz`;
    state.timings["audioReady_" + side] = performance.now();
  }

  // session time <-> a side's audio position (its audio holds no silence between chunks)
  function sessionTimeOf(side, seconds) {
    const track = state.audio[side], sample = seconds * track.rate, segments = track.segments;
    let lo = 0, hi = segments.length - 1, found = -1;
    while (lo <= hi) { const mid = (lo + hi) >> 1; if (segments[mid][1] <= sample) { found = mid; lo = mid + 1; } else hi = mid - 1; }
    if (found < 0) return segments.length ? segments[0][0] : 0;
    const [t, offset, count] = segments[found];
    return t + Math.min(sample - offset, count) / track.rate;
  }

  function audioPositionOf(side, t) {
    const track = state.audio[side];
    let best = null;
    for (const [start, offset, count] of track.segments) {
      const end = start + count / track.rate;
      if (start <= t && t < end) best = (offset + (t - start) * track.rate) / track.rate;
      else if (start > t && best === null) return offset / track.rate;
    }
    return best === null ? track.samples / (track.rate || 1) : best;
  }

  function seek(t) {
    for (const side of ["caller", "assistant"]) {
      const player = $("player-" + side), track = state.audio[side];
      if (!track.playable || !player.src) continue;
      player.currentTime = audioPositionOf(side, t);
    }
    const line = $("selection-line");
    line.hidden = false; line.style.left = x(t) + "px";
  }

  // ---- layout ---------------------------------------------------------------------------------
  const x = (t) => t * state.pxPerSec;
  function laneEvents(lane) {
    const list = [];
    for (const id of state.order) { const e = state.events.get(id); if (e.lane === lane && !e.gone) list.push(e); }
    return list;
  }
  function endOf(e) { return e.t1 === null || e.t1 === undefined ? Math.max(state.duration, e.t0) : e.t1; }

  // An event takes its bar on its row at the current zoom and, beside a bar too short for its
  // label, room for the label: no event is squeezed to a letter or two, however long the session.
  function isPoint(e) { return e.t1 !== null && e.t1 !== undefined && e.t1 - e.t0 < 1e-9; }
  function barPx(e) { return isPoint(e) ? POINT_PX : Math.max(MIN_EVENT_PX, x(endOf(e)) - x(e.t0)); }
  function takenPx(e) { const bar = barPx(e); return bar < LABEL_PX ? bar + LABEL_GAP + LABEL_PX : bar; }

  function packRows(lane) {
    // greedy interval packing on what is drawn: overlapping spans (with their labels) go to the next row
    const key = lane + "@" + state.pxPerSec;
    if (state.laneRows.has(key)) return state.laneRows.get(key);
    const events = laneEvents(lane).sort((a, b) => a.t0 - b.t0);
    const rowEnds = [], barEnds = [], rowStarts = [], rows = new Map();
    let crowdedFrom = Infinity;   // the first event drawn without the whole of its label, or under another
    for (const e of events) {
      const start = e.t0, end = start + (takenPx(e) + 1) / state.pxPerSec;
      const barEnd = start + (barPx(e) + 1) / state.pxPerSec;
      let row = rowEnds.findIndex((rowEnd) => rowEnd <= start);
      if (row < 0 && rowEnds.length < MAX_ROWS) row = rowEnds.length;
      if (row < 0) {   // the rows are full: a label is cut short, or bars overlap
        row = barEnds.findIndex((last) => last <= start);
        if (row < 0) row = MAX_ROWS - 1;
        crowdedFrom = Math.min(crowdedFrom, rowStarts[row]);
      }
      rowEnds[row] = Math.max(rowEnds[row] || 0, end);
      barEnds[row] = Math.max(barEnds[row] || 0, barEnd);
      rowStarts[row] = start;
      rows.set(e.id, row);
    }
    const packed = { events, rows, count: Math.max(1, rowEnds.length), crowdedFrom };
    state.laneRows.set(key, packed);
    return packed;
  }

  function visibleLanes() {
    return state.lanes.filter((lane) => {
      if (lane.id === "divergences") return !!state.replay;
      return true;
    });
  }

  // ---- rendering --------------------------------------------------------------------------
  function scheduleRender(full) {
    if (full) state.fullRender = true;
    if (state.renderQueued) return;
    state.renderQueued = true;
    requestAnimationFrame(() => { state.renderQueued = false; render(); });
  }

  function render() {
    const started = performance.now();
    const viewWidth = timeline.clientWidth || 800;
    const scrollLeft = timeline.scrollLeft;   // read once, before the DOM is touched (no forced layout)
    if (!state.fitted && state.duration >= 0) { openingZoom(viewWidth); state.fitted = true; }
    const width = Math.max(viewWidth, Math.ceil(x(state.duration)) + 40);
    inner.style.width = width + "px";
    if (state.fullRender) { renderSummary(); renderTranscript(); renderDivergences(); renderAudioNote(); state.fullRender = false; }
    const lo = scrollLeft / state.pxPerSec - 0.5 * viewWidth / state.pxPerSec;
    const hi = (scrollLeft + 1.5 * viewWidth) / state.pxPerSec;
    renderAxis(scrollLeft / state.pxPerSec, (scrollLeft + viewWidth) / state.pxPerSec);
    const labels = [], rows = [];
    for (const lane of visibleLanes()) {
      if (AUDIO_LANES[lane.id]) {
        labels.push(`<div class="lane-label" style="height:${LANE_H}px" data-lane="${lane.id}">${escapeHtml(lane.label)}</div>`);
        rows.push({ lane, height: LANE_H });
        continue;
      }
      const packed = packRows(lane.id);
      const height = Math.max(LANE_H, packed.count * ROW_H + 3);
      labels.push(`<div class="lane-label" style="height:${height}px" data-lane="${lane.id}">${escapeHtml(lane.label)}` +
                  ` <small>(${packed.events.length})</small></div>`);
      rows.push({ lane, height, packed });
    }
    // the lanes' skeleton changes only with their heights; what is in view is replaced in place
    const labelsHtml = labels.join("");
    if (labelsHtml !== state.labelsHtml) {
      state.labelsHtml = labelsHtml;
      $("lane-labels").innerHTML = labelsHtml;
      lanesBox.innerHTML = rows.map((row) => `<div class="lane" data-lane="${row.lane.id}" style="height:${row.height}px">` +
        (row.packed ? "" : `<canvas data-side="${row.lane.id}"></canvas>`) + "</div>").join("");
      state.laneHtml = new Map();
    }
    for (const row of rows) {
      const box = lanesBox.children[rows.indexOf(row)];
      if (row.packed) {
        const html = renderLaneEvents(row.packed, lo, hi);
        if (state.laneHtml.get(row.lane.id) !== html) { state.laneHtml.set(row.lane.id, html); box.innerHTML = html; }
      } else drawLevels(box.firstChild, row.lane.id, viewWidth, scrollLeft);
    }
    if (state.selected && state.events.has(state.selected)) {
      const line = $("selection-line"); line.hidden = false; line.style.left = x(state.events.get(state.selected).t0) + "px";
    }
    updatePlayheads();
    $("zoom-label").textContent = `${formatSeconds(viewWidth / state.pxPerSec)} in view`;
    const took = performance.now() - started;
    if (state.timings.firstRender === undefined) state.timings.firstRender = performance.now();
    state.timings.renders.push(took);
    if (state.timings.renders.length > 500) state.timings.renders.shift();
  }

  function renderLaneEvents(packed, lo, hi) {
    // Rows are packed at the current zoom, so events overlap only in a lane's last row, when more
    // spans overlap than it has rows: there the hidden ones are counted on the one drawn.
    const drawn = [], lastInRow = new Map();
    for (const e of packed.events) {
      const end = endOf(e);
      if (end < lo || e.t0 > hi) continue;
      const row = packed.rows.get(e.id) || 0;
      const left = x(e.t0);
      const point = isPoint(e), width = barPx(e), right = left + takenPx(e);
      const last = lastInRow.get(row);
      if (last && left < last.barRight - 1) {   // bars that overlap: the one drawn counts the others
        last.hidden += 1; last.right = Math.max(last.right, right); last.barRight = Math.max(last.barRight, left + width);
        continue;
      }
      if (last && left < last.right) last.labelPx = Math.max(0, left - last.barRight - LABEL_GAP);
      const item = { e, row, left, width, point, right, barRight: left + width, labelPx: LABEL_PX, hidden: 0 };
      lastInRow.set(row, item);
      drawn.push(item);
    }
    return drawn.map(({ e, row, left, width, point, hidden, labelPx }) => {
      const classes = ["ev", "k-" + e.kind];
      if (point) classes.push("point");
      if (e.status) classes.push("s-" + e.status);
      if (e.outcome) classes.push("o-" + e.outcome);
      if (e.role) classes.push("r-" + e.role);
      if (e.owner && e.owner !== "relay") classes.push("w-client");
      if (e.hidden) classes.push("hidden-call");
      if (e.id === state.selected) classes.push("selected");
      const beside = width < LABEL_PX;
      if (beside) classes.push("short");
      const extra = e.kind === "call" ? ` data-call-id="${escapeHtml(e.call_id)}" data-outcome="${escapeHtml(e.outcome)}"` : "";
      const more = hidden ? ` (+${hidden} more under it: zoom in)` : "";
      const label = `${hidden ? `<b>+${hidden}</b> ` : ""}${escapeHtml(eventLabel(e))}`;
      return `<div class="${classes.join(" ")}" data-id="${escapeHtml(e.id)}" data-kind="${e.kind}"${extra}` +
             ` style="left:${left.toFixed(1)}px;width:${width.toFixed(1)}px;top:${2 + row * ROW_H}px"` +
             ` title="${escapeHtml(tooltip(e) + more)}">${beside ? `<span class="ev-label" style="width:${labelPx.toFixed(1)}px">${label}</span>` : label}</div>`;
    }).join("");
  }

  function eventLabel(e) {
    if (e.kind === "call") return `${e.name || "call"} → ${e.output === null ? e.outcome : clip(e.output, 60)}`;
    if (e.kind === "response") return `${e.creator}: ${e.label}`;
    return clip(e.label || e.kind, 120);
  }

  function tooltip(e) {
    const lines = [`${e.kind} at ${formatSeconds(e.t0)}` + (e.t1 !== null && e.t1 !== e.t0 ? ` to ${formatSeconds(endOf(e))}` : "")];
    if (e.kind === "call") {
      lines.push(`${e.name}(${clip(e.arguments, 200)})`, `output: ${e.output === null ? "(none)" : clip(e.output, 300)}`,
                 `outcome: ${e.outcome}` + (e.handler_ms !== null ? `, handler ${e.handler_ms} ms` : ""));
      if (e.hidden) lines.push("hidden from the client: it never saw this call");
    } else lines.push(clip(e.label, 300));
    return lines.join("\n");
  }

  function drawLevels(canvas, side, viewWidth, scrollLeft) {
    const track = state.audio[side];
    const ratio = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(viewWidth * ratio)) {
      canvas.width = Math.round(viewWidth * ratio); canvas.height = LANE_H * ratio;
      canvas.style.width = viewWidth + "px"; canvas.style.height = LANE_H + "px";
    }
    canvas.style.left = scrollLeft + "px";
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, viewWidth, LANE_H);
    const color = side === "caller" ? "#2f6fdb" : "#1a9a62";
    const t0 = scrollLeft / state.pxPerSec, t1 = (scrollLeft + viewWidth) / state.pxPerSec;
    const levelWindow = 0.05, mid = LANE_H / 2;
    for (const [start, offset, count] of track.segments) {
      const end = start + count / track.rate;
      if (end < t0 || start > t1) continue;
      const left = x(start) - scrollLeft, right = x(end) - scrollLeft;
      g.fillStyle = color + "33";
      g.fillRect(left, 3, Math.max(1, right - left), LANE_H - 6);
      if (!track.levels.length) continue;
      g.fillStyle = color;
      g.beginPath();   // one path for the whole stretch: a fill per pixel is slow on a software canvas
      const from = Math.max(left, 0), to = Math.min(right, viewWidth);
      const levels = track.levels, perPixel = 1 / state.pxPerSec, base = offset / track.rate - start;
      for (let px = Math.floor(from); px < to; px++) {
        const t = (px + scrollLeft) * perPixel;
        const a = Math.floor((base + t) / levelWindow);
        const b = Math.max(a + 1, Math.floor((base + t + perPixel) / levelWindow));
        let peak = 0;
        for (let i = a; i < b && i < levels.length; i++) if (levels[i] > peak) peak = levels[i];
        const h = Math.max(1, (peak / 255) * (LANE_H - 6));
        g.rect(px, mid - h / 2, 1, h);
      }
      g.fill();
    }
  }

  function renderAxis(t0, t1) {
    const span = t1 - t0, steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
    const step = steps.find((s) => s * state.pxPerSec >= 70) || 3600;
    const html = [];
    for (let t = Math.floor(t0 / step) * step; t <= t1 + step && html.length < 400; t += step) {
      if (t < 0) continue;
      html.push(`<div class="tick" style="left:${x(t).toFixed(1)}px">${formatSeconds(t, step)}</div>`);
    }
    axis.innerHTML = html.join("");
    void span;
  }

  function renderSummary() {
    const s = state.summary || {}, src = state.source || {};
    const tools = Object.entries(s.tools || {});
    const statuses = Object.entries(s.responses_by_status || {}).map(([k, v]) => `${v} ${k}`).join(", ");
    const verdict = state.replay ? `<div class="verdict ${state.replay.ok ? "ok" : "bad"}">${escapeHtml(state.replay.verdict)}</div>` : "";
    $("summary").innerHTML =
      `<div><h1>${escapeHtml(src.name || "session")}</h1>` +
      `<div class="facts"><span>${escapeHtml(src.dialect || "")}</span><span>${escapeHtml(src.mode || "")}</span>` +
      (src.session_id ? `<span>${escapeHtml(src.session_id)}</span>` : "") +
      (src.started_at ? `<span>${escapeHtml(src.started_at)}</span>` : "") + `</div>${verdict}</div>` +
      `<div class="facts" id="facts">` +
      `<span>duration <b data-fact="duration">${formatSeconds(s.duration || 0)}</b></span>` +
      `<span>turns <b data-fact="turns">${s.turns || 0}</b></span>` +
      `<span>responses <b data-fact="responses">${s.responses || 0}</b>${statuses ? " (" + escapeHtml(statuses) + ")" : ""}</span>` +
      `<span>calls <b data-fact="calls">${s.calls || 0}</b></span>` +
      `<span class="${s.errors ? "bad" : ""}">errors <b data-fact="errors">${s.errors || 0}</b></span>` +
      `<span class="${s.anomalies ? "bad" : ""}">anomalies <b data-fact="anomalies">${s.anomalies || 0}</b></span>` +
      `<span>frames <b>${s.frames || 0}</b></span></div>` +
      (tools.length ? `<table class="tools" id="tool-table"><tr><th>tool</th><th>calls</th><th>errors</th><th>p50</th><th>max</th></tr>` +
        tools.map(([name, t]) => `<tr data-tool="${escapeHtml(name)}"><td>${escapeHtml(name)}</td><td>${t.calls}</td><td>${t.errors}</td>` +
          `<td>${t.p50_ms === null ? "–" : t.p50_ms.toFixed(1) + " ms"}</td><td>${t.max_ms === null ? "–" : t.max_ms.toFixed(1) + " ms"}</td></tr>`).join("") +
        `</table>` : "") +
      (state.warnings.length ? `<div class="warn">${state.warnings.length} warning(s) reading the recording: ${escapeHtml(clip(state.warnings.join("; "), 300))}</div>` : "");
  }

  function renderAudioNote() {
    const note = $("audio-note");
    note.hidden = !state.audioNote;
    note.textContent = state.audioNote || "";
    for (const side of ["caller", "assistant"]) {
      const track = state.audio[side];
      if (!track.playable) $("player-" + side).parentElement.hidden = true;
      else if (state.audioDirty[side] && (track.pending.length || track.chunks.length)) scheduleAudio(side);
    }
  }

  function scheduleAudio(side) {
    if (state.audioTimers[side]) return;
    state.audioTimers[side] = setTimeout(() => {
      state.audioTimers[side] = null;
      if (!state.audioDirty[side]) return;
      if (!$("player-" + side).paused) { scheduleAudio(side); return; }   // not under the listener's feet
      buildAudio(side);
    }, state.audioDelay);
  }

  function renderTranscript() {
    const words = state.order.map((id) => state.events.get(id)).filter((e) => e.kind === "words" && !e.gone)
      .sort((a, b) => a.t0 - b.t0);
    $("transcript").innerHTML = words.map((e) =>
      `<li class="role-${e.role}" data-id="${escapeHtml(e.id)}"><span class="t">${formatSeconds(e.t0)}</span>` +
      `<b>${e.role === "user" ? "user" : "assistant"}</b>: ${escapeHtml(e.text || e.label || "")}</li>`).join("");
  }

  function renderDivergences() {
    const box = $("divergences");
    if (!state.replay) { box.hidden = true; return; }
    const list = state.order.map((id) => state.events.get(id)).filter((e) => e.kind === "divergence");
    box.hidden = false;
    box.innerHTML = `<h2>Divergences (${list.length})</h2><ol>` +
      list.map((e) => `<li data-id="${escapeHtml(e.id)}">${escapeHtml(e.label)}</li>`).join("") + "</ol>";
  }

  // ---- detail ----------------------------------------------------------------------------
  function select(id, { seekAudio = true, reveal = false } = {}) {
    const e = state.events.get(id);
    if (!e) return;
    state.selected = id;
    if (reveal) revealTime(e.t0);
    if (seekAudio) seek(e.t0);
    renderDetail(e);
    scheduleRender(false);
  }

  function revealTime(t) {
    const view = timeline.clientWidth;
    if (x(t) < timeline.scrollLeft || x(t) > timeline.scrollLeft + view - 40) timeline.scrollLeft = Math.max(0, x(t) - view / 3);
  }

  function facts(rows) {
    return `<table class="facts">${rows.filter(([, v]) => v !== undefined && v !== null && v !== "")
      .map(([k, v]) => `<tr><th>${escapeHtml(k)}</th><td>${v}</td></tr>`).join("")}</table>`;
  }

  function pretty(text) {
    if (text === null || text === undefined) return "(none)";
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return String(text); }
  }

  function renderDetail(e) {
    const parts = [`<h2>${escapeHtml(e.kind.replace("_", "-"))}</h2>`];
    const ms = (v) => (v === null || v === undefined ? null : `${Number(v).toFixed(1)} ms`);
    const time = `${formatSeconds(e.t0)}` + (e.t1 !== null && e.t1 !== e.t0 ? ` → ${formatSeconds(endOf(e))}` : "");
    if (e.kind === "call") {
      parts.push(`<h1 class="call-name">${escapeHtml(e.name)}</h1>`);
      parts.push(facts([["call id", escapeHtml(e.call_id)], ["time", time], ["outcome", escapeHtml(e.outcome)],
        ["status", escapeHtml(e.status || "")], ["run by", escapeHtml(e.owner)],
        ["response", escapeHtml(e.response_id || "")], ["output item", escapeHtml(e.output_item_id || "")],
        ["answering response", escapeHtml(e.answered_by || "")], ["handler time", ms(e.handler_ms)],
        ["end to end", e.end_to_end_ms === null ? null : `${ms(e.end_to_end_ms)} (call ready → the answer starts)`],
        ["skipped", escapeHtml(e.skip_reason || "")]]));
      parts.push(`<h2>arguments</h2><pre class="arguments">${escapeHtml(pretty(e.arguments))}</pre>`);
      parts.push(`<h2>output</h2><pre class="output">${escapeHtml(pretty(e.output))}</pre>`);
      if (e.answers && e.answers.length > 1) {
        parts.push(`<h2>all answers</h2>` + e.answers.map((a) => `<pre>${escapeHtml(formatSeconds(a.t) + "  " + (a.status || "") + "\n" + pretty(a.output))}</pre>`).join(""));
      }
    } else if (e.kind === "response") {
      parts.push(facts([["response", escapeHtml(e.response_id)], ["time", time], ["status", escapeHtml(e.status)],
        ["created by", escapeHtml(e.creator)], ["out of band", e.out_of_band ? "yes" : null],
        ["calls", escapeHtml((e.call_ids || []).join(", "))],
        ["details", e.status_details ? `<code>${escapeHtml(JSON.stringify(e.status_details))}</code>` : null]]));
    } else if (e.kind === "words") {
      parts.push(facts([["who", e.role], ["time", time], ["item", escapeHtml(e.item_id || "")],
        ["truncated at", e.truncated_ms !== undefined ? `${e.truncated_ms} ms` : null]]));
      parts.push(`<pre>${escapeHtml(e.text || "")}</pre>`);
    } else if (e.kind === "divergence") {
      parts.push(`<h1>${escapeHtml(e.label)}</h1>`);
      parts.push(`<pre class="diff">${diffHtml(e.diff || "")}</pre>`);
      if (!e.diff) parts.push(`<h2>recorded</h2><pre>${escapeHtml(pretty(JSON.stringify(e.recorded)))}</pre>` +
                              `<h2>replayed</h2><pre>${escapeHtml(pretty(JSON.stringify(e.produced)))}</pre>`);
    } else {
      parts.push(`<h1>${escapeHtml(e.label)}</h1>`);
      parts.push(facts([["time", time], ["source", escapeHtml(e.source || "")], ["calls", escapeHtml((e.call_ids || []).join(", "))],
        ["response", escapeHtml(e.response_id || "")],
        ["instructions", e.instructions ? escapeHtml(e.instructions) : null]]));
      if (e.call && state.events.has(e.call)) parts.push(`<p><a href="#" data-goto="${escapeHtml(e.call)}">the call</a></p>`);
      if (e.related && state.events.has(e.related)) parts.push(`<p><a href="#" data-goto="${escapeHtml(e.related)}">what it concerns</a></p>`);
    }
    const frames = e.frames || [];
    parts.push(`<h2>frames (${frames.length})</h2>`);
    const shown = frames.slice(0, 150);
    for (const index of shown) parts.push(frameHtml(index));
    if (frames.length > shown.length) parts.push(`<button type="button" data-more="${escapeHtml(e.id)}">show all ${frames.length} frames</button>`);
    $("detail").innerHTML = parts.join("");
  }

  function frameHtml(index) {
    const frame = state.frames[index];
    if (!frame) return "";
    const [t, direction, text, binary] = frame;
    let type = "";
    try { const parsed = JSON.parse(text); type = parsed.type || Object.keys(parsed)[0] || ""; } catch (_) { type = "(not JSON)"; }
    return `<div class="frame" data-frame="${index}"><div class="head">${formatSeconds(t)}<span class="dir d-${direction}">${direction}</span>` +
           `${escapeHtml(type)}${binary ? " (binary frame)" : ""}</div><pre>${escapeHtml(pretty(text))}</pre></div>`;
  }

  function diffHtml(diff) {
    return diff.split("\n").map((line) => {
      const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
      return cls ? `<span class="${cls}">${escapeHtml(line)}</span>` : escapeHtml(line);
    }).join("\n");
  }

  // ---- playheads ---------------------------------------------------------------------------
  function updatePlayheads() {
    for (const side of ["caller", "assistant"]) {
      const player = $("player-" + side), head = $("playhead-" + side), track = state.audio[side];
      if (!track.playable || !player.src || (player.paused && player.currentTime === 0)) { head.hidden = true; continue; }
      head.hidden = false;
      head.style.left = x(sessionTimeOf(side, player.currentTime)) + "px";
    }
  }
  function followPlayback() {
    let playing = false;
    for (const side of ["caller", "assistant"]) {
      const player = $("player-" + side);
      if (!player.paused) {
        playing = true;
        const t = sessionTimeOf(side, player.currentTime);
        const view = timeline.clientWidth;
        if (x(t) > timeline.scrollLeft + view - 20 || x(t) < timeline.scrollLeft) timeline.scrollLeft = Math.max(0, x(t) - 40);
      }
    }
    updatePlayheads();
    if (playing) requestAnimationFrame(followPlayback);
  }

  // ---- zoom and input ----------------------------------------------------------------------
  function fit() {
    const width = (timeline.clientWidth || 800) - 30;
    state.pxPerSec = width / Math.max(state.duration, 0.001);
    state.laneRows.clear();
  }
  function openingZoom(viewWidth) {
    // the whole session, unless its start would be crowded then (a long session, or a long tool
    // call after a quick exchange): zoomed in until what the view opens on shows every label
    fit();
    for (let step = 0; step < 16 && state.pxPerSec < 20000; step++) {
      const inView = viewWidth / state.pxPerSec;
      const crowded = visibleLanes().some((lane) => !AUDIO_LANES[lane.id] && packRows(lane.id).crowdedFrom < inView);
      if (!crowded) return;
      state.pxPerSec *= 1.5;
    }
  }
  function zoom(factor, anchorPx) {
    const view = timeline.clientWidth;
    const anchor = anchorPx === undefined ? view / 2 : anchorPx;
    const t = (timeline.scrollLeft + anchor) / state.pxPerSec;
    const minimum = (view - 30) / Math.max(state.duration, 0.001);
    state.pxPerSec = Math.min(Math.max(state.pxPerSec * factor, minimum), 20000);
    state.laneRows.clear();
    inner.style.width = Math.max(view, Math.ceil(x(state.duration)) + 40) + "px";
    timeline.scrollLeft = Math.max(0, x(t) - anchor);
    scheduleRender(false);
  }

  timeline.addEventListener("scroll", () => scheduleRender(false), { passive: true });
  timeline.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey && !ev.metaKey) return;
    ev.preventDefault();
    zoom(ev.deltaY < 0 ? 1.25 : 0.8, ev.clientX - timeline.getBoundingClientRect().left);
  }, { passive: false });
  timeline.addEventListener("click", (ev) => {
    const target = ev.target.closest(".ev");
    if (target) { select(target.dataset.id); return; }
    const t = (ev.clientX - timeline.getBoundingClientRect().left + timeline.scrollLeft) / state.pxPerSec;
    $("cursor-label").textContent = `at ${formatSeconds(t)}`;
    seek(t);
  });
  $("zoom-in").addEventListener("click", () => zoom(2));
  $("zoom-out").addEventListener("click", () => zoom(0.5));
  $("zoom-fit").addEventListener("click", () => { fit(); timeline.scrollLeft = 0; scheduleRender(false); });
  $("transcript").addEventListener("click", (ev) => { const li = ev.target.closest("li"); if (li) select(li.dataset.id, { reveal: true }); });
  $("divergences").addEventListener("click", (ev) => { const li = ev.target.closest("li"); if (li) select(li.dataset.id, { reveal: true }); });
  $("detail").addEventListener("click", (ev) => {
    const goto = ev.target.closest("[data-goto]");
    if (goto) { ev.preventDefault(); select(goto.dataset.goto, { reveal: true }); return; }
    const more = ev.target.closest("[data-more]");
    if (more) {
      const e = state.events.get(more.dataset.more);
      more.insertAdjacentHTML("beforebegin", e.frames.slice(150).map(frameHtml).join(""));
      more.remove();
    }
  });
  for (const side of ["caller", "assistant"]) {
    const player = $("player-" + side);
    player.addEventListener("play", () => requestAnimationFrame(followPlayback));
    player.addEventListener("seeked", updatePlayheads);
    player.addEventListener("timeupdate", updatePlayheads);
  }
  window.addEventListener("resize", () => scheduleRender(false));

  // ---- helpers -------------------------------------------------------------------------------
  function escapeHtml(value) {
    return String(value === undefined || value === null ? "" : value).replace(/[&<>"']/g,
      (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function clip(text, width) { text = String(text === null || text === undefined ? "" : text).replace(/\s+/g, " "); return text.length > width ? text.slice(0, width - 1) + "…" : text; }
  function formatSeconds(t, step) {
    const precision = step === undefined ? (t < 10 ? 3 : 1) : step < 0.01 ? 3 : step < 1 ? 2 : 0;
    if (t < 60) return t.toFixed(precision) + " s";
    const m = Math.floor(t / 60), s = t - m * 60;
    if (m < 60) return `${m}:${s.toFixed(Math.min(precision, 1)).padStart(precision ? 4 : 2, "0")}`;
    const h = Math.floor(m / 60);
    return `${h}:${String(m % 60).padStart(2, "0")}:${s.toFixed(0).padStart(2, "0")}`;
  }

  // ---- start ----------------------------------------------------------------------------------
  window.inspector = {
    append, reset, select, seek, zoom, fit: () => { fit(); scheduleRender(false); }, state,
    timings: state.timings,
    sessionTimeOf, audioPositionOf,
  };
  const parseStarted = performance.now();
  const model = JSON.parse($("inspector-model").textContent);
  state.timings.parse = performance.now() - parseStarted;
  append(model);
  function loadEmbeddedAudio() {
    // the page's own audio, in the script elements after this one (base64 mu-law per side)
    for (const side of ["caller", "assistant"]) {
      const element = $("inspector-audio-" + side);
      const text = element ? element.textContent : "";
      if (text.trim()) { state.audio[side].pending.push(text); state.audioDirty[side] = true; }
    }
    renderAudioNote();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", loadEmbeddedAudio);
  else loadEmbeddedAudio();
})();
