// The inspector's one script (the Content-Security-Policy allows no
// other, and no inline script). Pages work without it; it only reads a
// picked JSONL file into the import form's text area.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var file = document.getElementById("import-file");
  var text = document.getElementById("import-jsonl");
  if (file && text) {
    file.addEventListener("change", function () {
      var f = file.files && file.files[0];
      if (!f) return;
      f.text().then(function (t) { text.value = t; });
    });
  }
});
