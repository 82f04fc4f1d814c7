// PlayStage: a "Present" button that puts the free-play demo around it (.ph-cow-demo-widget)
// on a stage over the whole window, its type fitted like the story's (fitText: the largest size
// in [MIN_FONT_PX, MAX_FONT_PX] at which everything fits, refitted after every step and resize).
// Esc, or the button (now "Leave"), puts the demo back where it was in the notebook.
function render({ el }) {
  el.classList.add("ph-play-stage");
  const present = document.createElement("button");
  present.className = "ph-play-present jupyter-widgets jupyter-button widget-button";
  present.textContent = "Present";
  present.title = "Full window for a projector (Esc leaves)";
  el.append(present);
  let staged = null; // {box, style, observer} while presenting
  const fit = () => staged && fitText(staged.box, staged.box);
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
    present.textContent = "Present";
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
  };
  present.addEventListener("click", () => (staged ? leave() : open()));
  addEventListener("resize", fit);
  return () => {
    leave();
    removeEventListener("resize", fit);
  };
}

export default { render };
