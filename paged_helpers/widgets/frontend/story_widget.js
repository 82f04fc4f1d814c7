// The live story: the kernel draws each frame (model "frame"); this view shows it inline,
// or on a stage over the whole window (Present), and sends the keys' and buttons' requests.
// Every request carries a number; the kernel answers by raising "served" to it. No answer
// within ANSWER_MS, or a widget JupyterLab marks as disconnected, puts a warning on screen.

const ANSWER_MS = 4000;

function button(label, className, title) {
  const node = document.createElement("button");
  node.type = "button";
  node.textContent = label;
  node.title = title;
  node.className = `ph-story-button ${className}`;
  Object.assign(node.style, { fontSize: "1em", padding: "0.2em 0.7em", marginRight: "0.4em", cursor: "pointer" });
  return node;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "ph-story";
  root.tabIndex = 0;
  root.setAttribute("data-lm-suppress-shortcuts", "true"); // JupyterLab leaves our keys alone
  root.setAttribute("aria-label", "Copy-on-write story: PageDown for the next step, PageUp to go back");
  Object.assign(root.style, { fontSize: "16px", outlineOffset: "2px" });

  const bar = document.createElement("div");
  bar.style.marginBottom = "0.4em";
  const back = button("\u25c0 Back", "ph-story-back", "Undo the last step (PageUp)");
  const next = button("Next \u25b6", "ph-story-next", "Run the announced step (PageDown)");
  const restart = button("Start again", "ph-story-restart", "Back to the empty cache (Home)");
  const present = button("Present", "ph-story-present", "Full window for a projector (Esc leaves)");
  bar.append(back, next, restart, present);
  const banner = makeBanner();
  const inline = document.createElement("div");
  inline.className = "ph-story-inline";
  root.append(bar, banner, inline);
  el.append(root);

  let stage = null; // {node, content, banner} while presenting
  let asked = model.get("served");
  let timer = null;
  let kernelGone = false;

  const warn = (text) => {
    for (const node of [banner, stage?.banner]) {
      if (!node) continue;
      node.textContent = text;
      node.hidden = !text;
    }
    if (stage) fitText(stage.node, stage.content);
  };

  const draw = () => {
    const frame = model.get("frame");
    inline.innerHTML = frame;
    back.disabled = model.get("position") === 0;
    next.disabled = model.get("position") === model.get("total");
    if (stage) {
      stage.frame.innerHTML = frame;
      fitText(stage.node, stage.content);
    }
  };

  const request = (action) => {
    if (kernelGone) return warn(KERNEL_GONE);
    asked = Math.max(asked, model.get("served")) + 1;
    const waitingFor = asked;
    try {
      model.send({ action, request: waitingFor });
    } catch (error) {
      return warn(KERNEL_SILENT);
    }
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (model.get("served") < waitingFor) warn(KERNEL_SILENT);
    }, ANSWER_MS);
  };

  const leave = () => {
    if (!stage) return;
    stage.node.remove();
    stage = null;
    if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
    root.focus();
  };

  const onKey = (event) => {
    const action = keyAction(event);
    if (!action) return;
    event.preventDefault();
    event.stopPropagation();
    if (action === "leave") leave();
    else request(action);
  };

  const open = () => {
    if (stage) return;
    const node = document.createElement("div");
    node.className = "ph-story-stage";
    node.tabIndex = 0;
    node.setAttribute("data-lm-suppress-shortcuts", "true");
    node.setAttribute("role", "dialog");
    node.setAttribute("aria-label", "Copy-on-write story, presented: PageDown next, PageUp back, Esc leaves");
    styleStage(node);
    const content = document.createElement("div");
    content.className = "ph-story-content";
    styleContent(content);
    const stageBanner = makeBanner();
    stageBanner.textContent = banner.textContent;
    stageBanner.hidden = banner.hidden;
    const frame = document.createElement("div");
    content.append(stageBanner, frame);
    node.append(content);
    node.addEventListener("keydown", onKey);
    document.body.append(node);
    stage = { node, content, banner: stageBanner, frame };
    draw();
    node.focus();
    // A real full screen hides the browser's own bars; refused without a user gesture.
    node.requestFullscreen?.().catch(() => {});
  };

  back.addEventListener("click", () => request("back"));
  next.addEventListener("click", () => request("next"));
  restart.addEventListener("click", () => request("restart"));
  present.addEventListener("click", open);
  root.addEventListener("keydown", onKey);
  model.on("change:frame", draw);
  model.on("change:served", () => {
    if (model.get("served") >= asked && !kernelGone) warn("");
  });
  const onResize = () => stage && fitText(stage.node, stage.content);
  addEventListener("resize", onResize);
  const onFullscreen = () => {
    if (!document.fullscreenElement && stage && stage.wasFullscreen) leave();
    if (stage) stage.wasFullscreen = Boolean(document.fullscreenElement);
  };
  document.addEventListener("fullscreenchange", onFullscreen);
  const stopWatching = watchKernel(el, model, (gone) => {
    kernelGone = gone;
    warn(gone ? KERNEL_GONE : "");
  });
  draw();

  return () => {
    stopWatching();
    clearTimeout(timer);
    removeEventListener("resize", onResize);
    document.removeEventListener("fullscreenchange", onFullscreen);
    stage?.node.remove();
  };
}

export default { render };
