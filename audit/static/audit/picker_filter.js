'use strict';
// A picker filter applies as soon as something is picked or cleared (the
// select2 widget itself is set up by Django's admin/js/autocomplete.js).
{
    const $ = django.jQuery;
    $(function() {
        $('select.owlai-picker').on('change', function() {
            if (!this.value) {
                this.removeAttribute('name');  // cleared: drop the filter
            }
            this.form.submit();
        });
    });
}
