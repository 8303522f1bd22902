/* The playbook pages' script (their CSP allows no inline script).
 *
 * Editor (playbook page, owner only): the parameters and steps as rows,
 * steps reordered with their move up / move down buttons, saved through the
 * playbooks API (PATCH); the service checks them (a step may use only the
 * outputs of the steps above it) and its reason is shown as it words it.
 *
 * Run page: the run's steps followed live: the run's websocket says when the
 * run changed and the page reads it from the run API (the database is the
 * truth, so a reload shows the same; a slow poll covers a lost frame);
 * outputs rendered by the chat page's render.js (sanitised markdown, token
 * chips) and a chip revealed through the chat reveal endpoint of the run's
 * conversation, which audits every attempt as chat does.
 */
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const fmt = (s, args) => String(s).replace(/%\((\w+)\)s/g, (_, k) => (k in args ? args[k] : ""));
  const csrf = () => {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (m) return decodeURIComponent(m[1]);
    const input = document.querySelector("[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  };

  async function api(path, options = {}) {
    const r = await fetch(path, {
      credentials: "same-origin",
      ...options,
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    });
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    if (!r.ok) {
      const error = new Error((body && body.detail) || "");
      error.status = r.status;
      error.body = body;
      throw error;
    }
    return body;
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function field(labelText, input, className) {
    const label = el("label", className || "");
    label.appendChild(document.createTextNode(labelText));
    label.appendChild(input);
    return label;
  }

  function input(value, name, type) {
    const box = el("input");
    box.type = type || "text";
    box.dataset.field = name;
    if (type === "checkbox") box.checked = !!value;
    else box.value = value === null || value === undefined ? "" : String(value);
    return box;
  }

  // --- editor --------------------------------------------------------------

  function editor(config) {
    const T = config.text;
    const root = $("editor");
    root.className = "pb-editor";
    const model = el("select");
    for (const m of config.models) {
      const option = el("option", "", m.label);
      option.value = m.id;
      option.selected = m.id === config.model;
      model.appendChild(option);
    }
    model.id = "editor-model";
    root.appendChild(field(T.model, model));
    const error = $("editor-error");
    const note = $("editor-note"); // role=status: a move is announced there
    const params = el("fieldset");
    params.appendChild(el("legend", "", T.parametersTitle));
    const nodes = el("fieldset");
    nodes.appendChild(el("legend", "", T.stepsTitle));
    root.append(params, nodes);

    function parameterRow(p) {
      const row = el("div", "pb-row pb-parameter");
      const kind = el("select");
      kind.dataset.field = "kind";
      for (const [value, label] of Object.entries(config.kinds)) {
        const option = el("option", "", label);
        option.value = value;
        option.selected = value === (p.kind || "text");
        kind.appendChild(option);
      }
      row.append(
        field(T.name, input(p.name, "name")),
        field(T.label, input(p.label, "label")),
        field(T.kind, kind),
        field(T.choices, input((p.choices || []).join(", "), "choices")),
        field(T.default, input(p.default, "default")),
        field(T.required, input(p.required !== false, "required", "checkbox")),
        removeButton(row),
      );
      return row;
    }

    function nodeRow(n) {
      const row = el("div", "pb-row pb-node-edit");
      row.dataset.kind = n.kind;
      // The step's number, as the service's reasons name it ("Step 2 …").
      row.append(el("span", "pb-step-number"), field(T.key, input(n.key, "key")));
      if (n.kind === "agent") {
        const prompt = el("textarea");
        prompt.rows = 3;
        prompt.dataset.field = "prompt";
        prompt.value = n.prompt || "";
        row.appendChild(field(T.prompt, prompt, "pb-grow"));
      } else {
        const tool = el("select");
        tool.dataset.field = "tool";
        for (const name of config.tools) {
          const option = el("option", "", name);
          option.value = name;
          option.selected = name === n.tool;
          tool.appendChild(option);
        }
        const args = el("textarea");
        args.rows = 2;
        args.dataset.field = "arguments";
        args.value = JSON.stringify(n.arguments || {});
        row.append(field(T.tool, tool), field(T.arguments, args, "pb-grow"));
      }
      row.append(moveButton(row, "up"), moveButton(row, "down"), removeButton(row, numberSteps));
      return row;
    }

    function removeButton(row, then) {
      const button = el("button", "icon", T.remove);
      button.type = "button";
      button.dataset.remove = "1";
      button.addEventListener("click", () => {
        row.remove();
        if (then) then();
      });
      return button;
    }

    function moveButton(row, direction) {
      const button = el("button", "icon pb-move", direction === "up" ? T.moveUp : T.moveDown);
      button.type = "button";
      button.dataset.move = direction;
      button.addEventListener("click", () => moveStep(row, direction));
      return button;
    }

    function moveStep(row, direction) {
      const other = direction === "up" ? row.previousElementSibling : row.nextElementSibling;
      if (!other) return;
      if (direction === "up") other.before(row);
      else other.after(row);
      numberSteps();
      // Moving the row took the focus from the pressed button: give it back,
      // so the keyboard can go on moving the same step (at an edge, where
      // that button is now disabled, to the row's other one).
      const buttons = [`[data-move="${direction}"]`, "[data-move]", "[data-remove]"].map((q) => row.querySelector(q));
      const target = buttons.find((b) => b && !b.disabled);
      if (target) target.focus();
      const key = value(row, "key").value.trim();
      note.textContent = fmt(T.moved, { key: key || "-", n: [...nodeRows.children].indexOf(row) + 1 });
    }

    // Each step's number, its buttons' names (a screen reader hears which
    // step a button moves) and the moves that cannot be made disabled.
    function numberSteps() {
      const rows = [...nodeRows.children];
      rows.forEach((row, index) => {
        const n = index + 1;
        row.querySelector(".pb-step-number").textContent = fmt(T.stepNumber, { n });
        const up = row.querySelector('[data-move="up"]');
        const down = row.querySelector('[data-move="down"]');
        up.disabled = index === 0;
        down.disabled = index === rows.length - 1;
        up.setAttribute("aria-label", fmt(T.moveUpLabel, { n }));
        down.setAttribute("aria-label", fmt(T.moveDownLabel, { n }));
        row.querySelector("[data-remove]").setAttribute("aria-label", fmt(T.removeStep, { n }));
      });
    }

    function addButton(text, onClick) {
      const button = el("button", "", text);
      button.type = "button";
      button.addEventListener("click", onClick);
      return button;
    }

    const paramRows = el("div");
    for (const p of config.parameters) paramRows.appendChild(parameterRow(p));
    params.append(paramRows, addButton(T.addParameter, () => paramRows.appendChild(parameterRow({ kind: "text" }))));
    const nodeRows = el("div");
    nodeRows.className = "pb-node-rows";
    for (const n of config.nodes) nodeRows.appendChild(nodeRow(n));
    const addStep = (n) => {
      nodeRows.appendChild(nodeRow(n));
      numberSteps();
    };
    nodes.append(
      nodeRows,
      addButton(T.addAgent, () => addStep({ kind: "agent" })),
      addButton(T.addTool, () => addStep({ kind: "tool", arguments: {} })),
    );
    numberSteps();

    const value = (row, name) => row.querySelector(`[data-field="${name}"]`);

    function collect() {
      const parameters = [...paramRows.children].map((row) => {
        const p = {
          name: value(row, "name").value.trim(),
          label: value(row, "label").value.trim(),
          kind: value(row, "kind").value,
          required: value(row, "required").checked,
          choices: value(row, "choices").value.split(",").map((c) => c.trim()).filter(Boolean),
        };
        const fallback = value(row, "default").value.trim();
        if (fallback) p.default = fallback;
        return p;
      });
      const steps = [...nodeRows.children].map((row, index) => {
        const key = value(row, "key").value.trim();
        if (row.dataset.kind === "agent") return { key, kind: "agent", prompt: value(row, "prompt").value };
        let args;
        try {
          args = JSON.parse(value(row, "arguments").value || "{}");
        } catch (e) {
          throw new Error(fmt(T.badJson, { n: index + 1 }));
        }
        return { key, kind: "tool", tool: value(row, "tool").value, arguments: args };
      });
      return { model: Number(model.value), parameters, nodes: steps };
    }

    $("editor-save").addEventListener("click", async () => {
      error.hidden = true;
      note.textContent = "";
      try {
        await api(config.detailUrl, { method: "PATCH", body: JSON.stringify(collect()) });
        note.textContent = T.saved;
        window.location.reload();
      } catch (e) {
        const detail = e.message || (e.body && JSON.stringify(e.body)) || T.networkError;
        error.textContent = detail;
        error.hidden = false;
      }
    });
  }

  // --- run page ------------------------------------------------------------

  function runPage(config) {
    const T = config.text;
    const popover = $("popover");
    let timer = null;
    const shown = {}; // node index -> the JSON it was last drawn from

    function tokenKind(token) {
      const label = token.slice(1, token.lastIndexOf("-"));
      return config.tokenKinds[label] || label;
    }

    function makeChip(token) {
      const chip = el("span", "pii", token);
      chip.dataset.token = token;
      chip.tabIndex = 0;
      chip.setAttribute("role", "button");
      const kind = tokenKind(token);
      chip.title = config.mayReveal ? fmt(T.revealHint, { kind }) : fmt(T.maskedHint, { kind });
      chip.classList.add(config.mayReveal ? "revealable" : "locked");
      return chip;
    }

    window.OwlRender.configure({ tokenLabels: Object.keys(config.tokenKinds), makeChip });

    function showPopover(anchor, text) {
      popover.textContent = text;
      popover.hidden = false;
      const r = anchor.getBoundingClientRect();
      popover.style.left = Math.max(8, r.left) + "px";
      popover.style.top = r.bottom + 6 + "px";
    }
    document.addEventListener("click", (e) => {
      if (!e.target.closest || !e.target.closest(".pii")) popover.hidden = true;
    });

    async function onChip(chip) {
      const token = chip.dataset.token;
      if (chip.classList.contains("revealed")) return;
      if (!config.mayReveal || !config.revealUrl) {
        showPopover(chip, fmt(T.maskedHint, { kind: tokenKind(token) }));
        return;
      }
      try {
        const r = await api(config.revealUrl, { method: "POST", body: JSON.stringify({ token }) });
        for (const same of document.querySelectorAll(".pii")) {
          if (same.dataset.token === token) {
            same.textContent = r.original;
            same.title = fmt(T.revealedHint, { token });
            same.classList.add("revealed");
          }
        }
      } catch (e) {
        chip.title = T.revealRefused;
        showPopover(chip, e.status === 403 && e.message ? e.message : T.revealRefused);
      }
    }
    document.addEventListener("click", (e) => {
      const chip = e.target.closest && e.target.closest(".pii");
      if (chip) onChip(chip);
    });
    document.addEventListener("keydown", (e) => {
      const chip = e.target.closest && e.target.closest(".pii");
      if (chip && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        onChip(chip);
      }
    });

    function nodeView(node) {
      const box = el("details", `step pb-node node-${node.status}`);
      box.open = true;
      box.dataset.index = node.index;
      box.dataset.status = node.status;
      const summary = el("summary");
      const title = el("span", "step-tool", `${node.index + 1}. `);
      title.appendChild(el("code", "", node.key));
      const badge = el("span", `badge pb-status-${node.status}`, T.nodeStatus[node.status] || node.status);
      summary.append(title, document.createTextNode(` ${node.kind === "agent" ? T.agent : T.tool} `), badge);
      box.appendChild(summary);
      const body = el("div", "step-body");
      if (node.reason) body.appendChild(el("div", "step-reason", node.reason));
      body.appendChild(el("div", "step-label", T.input));
      const given = el("pre");
      given.appendChild(window.OwlRender.textWithChips(node.input || ""));
      body.appendChild(given);
      if (node.output) {
        body.appendChild(el("div", "step-label", T.output));
        if (node.kind === "agent") {
          const answer = el("div", "markdown pb-output");
          answer.appendChild(window.OwlRender.markdown(node.output));
          body.appendChild(answer);
        } else {
          const result = window.OwlRender.toolResult(node.output);
          result.classList.add("pb-output");
          body.appendChild(result);
        }
      }
      box.appendChild(body);
      return box;
    }

    function draw(run) {
      const status = $("run-status");
      status.textContent = config.statuses[run.status] || run.status;
      status.className = `badge pb-status-${run.status}`;
      status.dataset.status = run.status;
      const reason = $("run-reason");
      reason.textContent = run.reason || "";
      reason.hidden = !run.reason;
      const list = $("run-nodes");
      if (!list.dataset.live) {
        list.replaceChildren(); // the server's plain rendering, now drawn with chips
        list.dataset.live = "1";
      }
      for (const node of run.nodes) {
        const key = JSON.stringify(node);
        if (shown[node.index] === key) continue;
        shown[node.index] = key;
        const fresh = nodeView(node);
        const old = list.querySelector(`.pb-node[data-index="${node.index}"]`);
        if (old) old.replaceWith(fresh);
        else list.appendChild(fresh);
      }
      $("run-stop").disabled = !config.active.includes(run.status);
      const approval = $("run-approval"); // the run waits for its person's answer in its conversation
      if (approval) approval.hidden = run.status !== "waiting_approval";
      document.body.dataset.runStatus = run.status;
    }

    // Live: the run's socket (playbooks.consumers) only says that the run
    // changed, or which tool its running step calls; the run itself is read
    // from the run API, so a reload shows what the live page showed. A slow
    // poll covers a frame the channel layer lost.
    const active = (status) => config.active.includes(status);
    let finished = false;
    let fetching = false;
    let again = false;
    let socket = null;
    let retryTimer = null;
    let retryDelay = 500;
    let stepsTurn = null; // the turn (step) whose tool calls are shown
    let calls = new Map(); // call_id -> {tool, outcome}

    async function refresh() {
      if (fetching) {
        again = true; // read once more when this read returns: a frame came meanwhile
        return;
      }
      fetching = true;
      clearTimeout(timer);
      try {
        const run = await api(config.runUrl);
        draw(run);
        drawCalls();
        if (!active(run.status)) finish();
      } catch (e) {
        // the next frame or the fallback poll reads it again
      }
      fetching = false;
      if (again && !finished) {
        again = false;
        refresh();
        return;
      }
      if (!finished) timer = setTimeout(refresh, config.pollSeconds * 1000);
    }

    function finish() {
      finished = true; // nothing more will change
      clearTimeout(timer);
      clearTimeout(retryTimer);
      if (socket) {
        socket.onclose = null;
        socket.close();
        socket = null;
      }
    }

    function drawCalls() {
      // Only on a step still running: what it is doing now, not part of the
      // run's record (that is the step's output, read from the API).
      for (const old of document.querySelectorAll("#run-nodes .pb-activity")) old.remove();
      const step = document.querySelector(
        '#run-nodes .pb-node[data-status="running"], #run-nodes .pb-node[data-status="waiting_approval"]'
      );
      if (!step || calls.size === 0) return;
      const list = el("ul", "pb-activity");
      for (const call of calls.values()) {
        const item = el("li");
        item.appendChild(el("code", "", call.tool));
        const outcome = call.outcome || "running";
        item.append(" ", el("span", `badge pb-call-${outcome}`, T.callOutcome[outcome] || outcome));
        list.appendChild(item);
      }
      step.querySelector(".step-body").prepend(list);
    }

    function onFrame(frame) {
      if (frame.type === "run.changed" || frame.type === "turn.finished") {
        refresh();
        return;
      }
      if (!frame.call_id) return;
      if (frame.turn_id !== stepsTurn) {
        stepsTurn = frame.turn_id; // the next step: its calls only
        calls = new Map();
      }
      const call = calls.get(frame.call_id) || { tool: frame.tool || "", outcome: null };
      if (frame.tool) call.tool = frame.tool;
      if (frame.type === "tool.finished") call.outcome = frame.outcome;
      else if (frame.type === "approval.requested") call.outcome = "waiting";
      else if (frame.type === "approval.decided") call.outcome = null;
      calls.set(frame.call_id, call);
      drawCalls();
      if (frame.type === "approval.requested") refresh();
    }

    function connect() {
      if (finished) return;
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const ws = new WebSocket(`${scheme}://${location.host}${config.socketPath}`);
      socket = ws;
      ws.onopen = () => {
        retryDelay = 500;
      };
      ws.onmessage = (e) => {
        let frame = null;
        try {
          frame = JSON.parse(e.data);
        } catch (err) {
          return;
        }
        onFrame(frame);
      };
      ws.onclose = (e) => {
        if (socket !== ws) return;
        socket = null;
        if (e.code === 4401) {
          window.location.reload(); // signed out: the page asks to sign in
          return;
        }
        if (finished || e.code === 4403 || e.code === 4404) return; // the fallback poll goes on
        // 0.5 s doubling to 10 s, with jitter (as the chat page); the server
        // sends the run as stored on every connect.
        retryTimer = setTimeout(connect, retryDelay * (0.5 + Math.random()));
        retryDelay = Math.min(retryDelay * 2, 10000);
      };
    }

    for (const value of document.querySelectorAll("#run-parameters .pb-value")) {
      value.replaceChildren(window.OwlRender.textWithChips(value.textContent));
    }
    refresh();
    connect();
    window.addEventListener("pagehide", finish);
  }

  const editorConfig = $("editor-config");
  if (editorConfig && $("editor")) editor(JSON.parse(editorConfig.textContent));
  const runConfig = $("run-config");
  if (runConfig) runPage(JSON.parse(runConfig.textContent));
})();
