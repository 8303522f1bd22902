'use strict';
// Role admin, DB grants: show the analysed tables of the connection chosen in
// the same row only. Changing the connection clears the tables picked for the
// old one (they name nothing in the new one); the server checks again.
{
    function sync(row, clear) {
        const select = row.querySelector('select[name$="-connection"]');
        const picker = row.querySelector('[data-owlai-grant-tables]');
        if (!select || !picker) {
            return;
        }
        for (const group of picker.querySelectorAll('.owlai-grant-group')) {
            const mine = group.dataset.connectionId === select.value;
            group.hidden = !mine;
            if (!mine && clear) {
                for (const box of group.querySelectorAll('input[type=checkbox]')) {
                    box.checked = false;
                }
            }
        }
    }

    function setUp(row) {
        const select = row.querySelector('select[name$="-connection"]');
        if (!select || select.dataset.owlaiGrantTables) {
            return;
        }
        select.dataset.owlaiGrantTables = 'on';
        select.addEventListener('change', () => sync(row, true));
        sync(row, false);
    }

    document.addEventListener('DOMContentLoaded', () => {
        document.querySelectorAll('tr.form-row, div.inline-related').forEach(setUp);
    });
    document.addEventListener('formset:added', (event) => {
        const row = event.target.closest('tr') || event.target;
        setUp(row);
    });
}
