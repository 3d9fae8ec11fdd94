// A call's page approves what it shows. While an argument differs from the call's, "Approve as
// proposed" waits (the edit is reviewed, or the page reloaded); while one differs from what was
// reviewed, "Approve the revised call" waits (it is reviewed again). Each says why.
(function () {
  "use strict";

  function differs(field, shown) {
    if (field.name === "tool_args") {
      try {
        return JSON.stringify(JSON.parse(field.value)) !== JSON.stringify(JSON.parse(shown));
      } catch (error) {
        return true;
      }
    }
    return field.value.trim() !== shown.trim();
  }

  function drawnWith(field) {
    if (field.tagName === "SELECT") {
      var chosen = Array.prototype.find.call(field.options, function (option) {
        return option.defaultSelected;
      });
      return chosen ? chosen.value : field.options.length ? field.options[0].value : "";
    }
    return field.defaultValue;
  }

  function fields() {
    return Array.prototype.slice.call(
      document.querySelectorAll("form[data-arguments] [data-on-the-table]")
    );
  }

  function update() {
    var edited = fields().some(function (field) {
      return differs(field, field.getAttribute("data-on-the-table"));
    });
    var changedSinceReview = fields().some(function (field) {
      return differs(field, drawnWith(field));
    });
    document.querySelectorAll("[data-approves=table]").forEach(function (button) {
      button.disabled = edited;
    });
    document.querySelectorAll("[data-approves=reviewed]").forEach(function (button) {
      button.disabled = changedSinceReview;
    });
    var editedNote = document.getElementById("edited-note");
    if (editedNote) {
      editedNote.hidden = !(edited && document.querySelector("[data-approves=table]"));
    }
    var reviewedNote = document.getElementById("reviewed-note");
    if (reviewedNote) {
      reviewedNote.hidden = !changedSinceReview;
    }
  }

  function onEdit(event) {
    if (event.target.closest && event.target.closest("form[data-arguments]")) {
      update();
    }
  }

  document.addEventListener("input", onEdit);
  document.addEventListener("change", onEdit);
  // The page is drawn again when a colleague decides: its buttons start from what it shows.
  document.addEventListener("htmx:afterSwap", update);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", update);
  } else {
    update();
  }
})();
