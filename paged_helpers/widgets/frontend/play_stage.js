// PlayStage: a "Present" button that puts the free-play demo around it (.ph-cow-demo-widget)
// on a stage over the whole window, its type fitted like the story's (fitText: the largest size
// in [MIN_FONT_PX, MAX_FONT_PX] at which everything fits, refitted after every step and resize;
// below MIN_FONT_PX only for a demo larger than the lecture's bounds, never cut off).
// Esc, or the button (now "Leave"), puts the demo back where it was in the notebook. The model's
// "staged" tells the kernel, which then draws the picture for a projector (compact pool).
const STAGE_LAYOUTS = ["below", "beside-4", "beside-5", "beside-6"];

function render({ model, el }) {
  el.classList.add("ph-play-stage");
  const present = document.createElement("button");
  present.className = "ph-play-present jupyter-widgets jupyter-button widget-button";
  present.textContent = "Present";
  present.title = "Full window for a projector (Esc leaves)";
  el.append(present);
  let staged = null; // {box, style, observer} while presenting
  // Each layout (the tables under the pool, or beside a pool N tiles wide; the demo's style sheet
  // draws them) is fitted in turn, and the one with the largest type wins: a wide, short window
  // takes the tables beside the pool, a squarer one under it. Only if none fits at MIN_FONT_PX,
  // the dense tiles (no fill bar where the words show the slots, no "shared by N") are tried too.
  const fit = () => {
    if (!staged) return;
    const { box } = staged;
    let best = null;
    for (const dense of [false, true]) {
      if (best && best.size >= MIN_FONT_PX) break;
      if (dense) box.dataset.dense = "";
      for (const layout of STAGE_LAYOUTS) {
        box.dataset.layout = layout;
        const size = fitText(box, box, LAST_RESORT_FONT_PX);
        if (!best || size > best.size) best = { layout, size, dense };
      }
    }
    if (!best.dense) delete box.dataset.dense;
    box.dataset.layout = best.layout;
    fitText(box, box, LAST_RESORT_FONT_PX);
    box.scrollTop = 0; // a stage never scrolls: what an earlier, larger frame scrolled, back
    box.scrollLeft = 0;
  };
  const onKey = (event) => {
    if (keyAction(event) !== "leave") return;
    event.preventDefault();
    event.stopPropagation();
    leave();
  };
  const leave = () => {
    if (!staged) return;
    const { box, style, observer, home, next } = staged;
    staged = null;
    home.insertBefore(box, next); // back in its place in the notebook
    observer.disconnect();
    box.removeEventListener("keydown", onKey);
    box.classList.remove("ph-staged");
    if (style === null) box.removeAttribute("style");
    else box.setAttribute("style", style);
    delete box.dataset.fontPx;
    delete box.dataset.layout;
    delete box.dataset.dense;
    present.textContent = "Present";
    tell(false);
  };
  const tell = (on) => {
    try {
      model.set("staged", on);
      model.save_changes();
    } catch (error) {
      // no kernel: the stage still works, with the notebook's picture
    }
  };
  const open = () => {
    const box = el.closest(".ph-cow-demo-widget");
    if (!box || staged) return;
    staged = {
      box,
      style: box.getAttribute("style"),
      observer: new MutationObserver(() => requestAnimationFrame(fit)),
      home: box.parentNode,
      next: box.nextSibling,
    };
    // On the page itself: inside the notebook, a transformed or contained ancestor would make
    // "fixed" mean fixed to the notebook's panel, not to the window.
    document.body.append(box);
    styleStage(box);
    Object.assign(box.style, { padding: "0.4em 0.8em", overflow: "hidden" });
    box.classList.add("ph-staged");
    box.setAttribute("data-lm-suppress-shortcuts", "true"); // JupyterLab leaves Esc to us
    box.tabIndex = -1;
    box.addEventListener("keydown", onKey);
    box.focus();
    present.textContent = "Leave";
    // Each step replaces the picture's HTML (childList) or a label (characterData): refit then.
    staged.observer.observe(box, { subtree: true, childList: true, characterData: true });
    fit();
    tell(true);
  };
  present.addEventListener("click", () => (staged ? leave() : open()));
  addEventListener("resize", fit);
  return () => {
    leave();
    removeEventListener("resize", fit);
  };
}

export default { render };
