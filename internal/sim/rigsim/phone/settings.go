package phone

// settingsRows are the rows of the Settings root page; only Wi-Fi and General open something.
var settingsRows = []string{"Airplane Mode", "Wi-Fi", "Bluetooth", "Cellular", "Notifications", "Sounds", "Focus", "Screen Time", "General", "Display & Brightness", "Wallpaper", "Battery", "Privacy & Security", "App Store", "Passwords"}

func onOff(b bool) string {
	if b {
		return "On"
	}
	return "Off"
}

func settingsRoot(p *Phone, _ string) page {
	els := titleBar("Settings", "")
	for i, row := range settingsRows {
		y := contentTop + 0.02 + float64(i)*rowHeight
		var open func(p *Phone)
		switch row {
		case "Wi-Fi":
			open = func(p *Phone) { p.push("settings.wifi") }
		case "General", "Display & Brightness", "Battery":
			r := row
			open = func(p *Phone) { p.push("settings.general:" + r) }
		}
		if open != nil {
			els = append(els, rowTarget(y, open))
		}
		els = append(els, textEl(row, marginX, y, 2).onTap(open))
		switch row {
		case "Wi-Fi":
			value := "Off"
			if p.wifi {
				value = "HomeNet"
			}
			els = append(els, rightAligned(value, 0.84, y, 2).color("grey").onTap(open))
		case "Bluetooth":
			els = append(els, rightAligned("On", 0.84, y, 2).color("grey"))
		}
	}
	return page{elements: els, scrollable: true}
}

// settingsWiFi has the Wi-Fi switch, drawn with its state as text ("On"/"Off"): tap it to toggle.
func settingsWiFi(p *Phone, _ string) page {
	els := titleBar("Wi-Fi", "Settings")
	y := contentTop + 0.02
	els = append(els, textEl("Wi-Fi", marginX, y, 2))
	toggle := func(p *Phone) { p.wifi = !p.wifi }
	sw := rightAligned(onOff(p.wifi), 0.84, y, 2).onTap(toggle)
	if p.wifi {
		sw = sw.filled("green")
	} else {
		sw = sw.filled("grey")
	}
	els = append(els, sw)
	if p.wifi {
		els = append(els, textEl("HomeNet", marginX, y+rowHeight, 2).color("blue"), textEl("NETWORKS", marginX, y+2*rowHeight, 1).color("grey"))
		for i, n := range []string{"Cafe Guest", "Neighbour 5G"} {
			els = append(els, textEl(n, marginX, y+float64(3+i)*rowHeight, 2))
		}
	}
	return page{elements: els}
}

func settingsPlain(p *Phone, title string) page {
	return page{elements: append(titleBar(title, "Settings"), textEl("About", marginX, contentTop+0.02, 2), textEl("Software Update", marginX, contentTop+0.02+rowHeight, 2))}
}
