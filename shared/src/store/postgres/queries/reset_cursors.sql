DELETE FROM cursors WHERE consumer = $1
